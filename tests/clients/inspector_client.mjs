// One client of the client matrix (tests/client_matrix.rs): the MCP Inspector's CLI (npm
// `@modelcontextprotocol/inspector`, `inspector --cli`), one process per step, as a user runs it.
//
// Runs the matrix's steps that the CLI offers and prints one JSON line per step:
// `{"step": name, "ok": true|false, "detail": "..."}`. The CLI has no `ping` and no `completion/complete`
// (it answers "Unsupported method"), so those two steps are not reported for it.
//
//   node inspector_client.mjs [--era legacy|modern] [--gateway SERVER] --http URL [--header "Name: value" ...]
//   node inspector_client.mjs [--era legacy|modern] [--gateway SERVER] [--env NAME=VALUE ...] --stdio -- COMMAND [ARG ...]
//
// INSPECTOR_BIN names the CLI's entry script (`.../inspector/clients/launcher/build/index.js`); it runs under this
// script's Node (22, which the CLI needs). Over HTTP the CLI gets `--transport http` (it cannot tell the transport from
// a URL ending in `/mcp/`) and the headers with `--header`. Over stdio the server's command follows `--`, so that its own
// options (mcpgw's `--config`) are not taken for the CLI's.

import { execFile } from "node:child_process";

const GW_TOOLS = [
  "gw_list_all_servers",
  "gw_get_server_info",
  "gw_discover_all_tools",
  "gw_secure_call_tools",
  "gw_get_cache_status",
  "gw_clear_cache",
  "gw_get_timeout_metrics",
];
const ECHO = "hello from the client matrix";

const args = process.argv.slice(2);
let url = null;
let gateway = null;
let era = "legacy";
let command = null;
const headers = [];
const env = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--http") url = args[++i];
  else if (args[i] === "--header") headers.push(args[++i]);
  else if (args[i] === "--env") env.push(args[++i]);
  else if (args[i] === "--gateway") gateway = args[++i];
  else if (args[i] === "--era") era = args[++i];
  else if (args[i] === "--stdio") {
    command = args.slice(i + 1);
    if (command[0] === "--") command = command.slice(1);
    break;
  }
}

// At most this many CLI processes at once (each starts Node, and over stdio the server too).
const PARALLEL = 3;
let running = 0;
const queue = [];
const slot = () => (running < PARALLEL ? (running++, Promise.resolve()) : new Promise((go) => queue.push(go)));
const release = () => (queue.length ? queue.shift()() : running--);

/// Runs the CLI for one method; resolves to its parsed JSON answer (`{result}` or `{error}`).
async function inspector(method, extra = []) {
  await slot();
  try {
    return await inspectorNow(method, extra);
  } finally {
    release();
  }
}

function inspectorNow(method, extra) {
  // A connect timeout well over the CLI's 15 s default: CI machines are shared, and a stdio server starts with it.
  const cli = [process.env.INSPECTOR_BIN, "--cli", "--format", "json", "-q", "--protocol-era", era, "--connect-timeout", "90000"];
  cli.push("--method", method, ...extra);
  if (url) {
    cli.push("--transport", "http", "--server-url", url);
    for (const h of headers) cli.push("--header", h);
  } else {
    for (const e of env) cli.push("-e", e);
    cli.push("--", ...command);
  }
  return new Promise((resolve) => {
    execFile(process.execPath, cli, { timeout: 90_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      const text = `${stdout}`.trim() || `${stderr}`.trim();
      try {
        resolve(JSON.parse(text.split("\n").find((l) => l.startsWith("{")) ?? text));
      } catch {
        resolve({ error: { message: `exit ${error?.code ?? 0}: ${text.slice(0, 300)}` } });
      }
    });
  });
}

const results = [];
const report = (step, ok, detail = "") => results.push({ step, ok: Boolean(ok), detail: String(detail).slice(0, 300) });

async function step(name, method, extra, check, answered = null) {
  const answer = answered ?? (await inspector(method, extra));
  if (answer.error || answer.result === undefined) {
    report(name, false, JSON.stringify(answer.error ?? answer));
    return;
  }
  try {
    const [ok, detail] = check(answer.result);
    report(name, ok, detail);
  } catch (e) {
    report(name, false, `${e?.message ?? e}: ${JSON.stringify(answer.result).slice(0, 200)}`);
  }
}

const textOf = (result) => (result.content ?? []).map((c) => c.text ?? "").join(" ");
const toolArgs = (tool, object) => ["--tool-name", tool, "--tool-args-json", JSON.stringify(object)];
const gwCheck = (check) => (r) => {
  const data = r.structuredContent ?? {};
  return [data.status === "success" && !r.isError && check(data), textOf(r)];
};

// The first resource's URI is needed by resources/read: listed first, then every other step at once.
const listed = await inspector("resources/list");
const listCheck = (r) => [r.resources.length > 0, `${r.resources.length} resources`];
await step("resources/list", "resources/list", [], listCheck, listed);
const firstUri = listed.result?.resources?.[0]?.uri ?? "demo://resource/static/document/features.md";

const steps = [
  step("initialize", "initialize", [], (r) => [typeof r.protocolVersion === "string" || r.serverInfo !== undefined,
    `protocol ${r.protocolVersion ?? "(stateless)"}`]),
  step("tools/list", "tools/list", [], (r) => [r.tools.some((t) => t.name === "echo"), `${r.tools.length} tools`]),
  step("tools/call echo", "tools/call", toolArgs("echo", { message: ECHO }), (r) => [
    textOf(r).includes(ECHO) && !r.isError,
    textOf(r),
  ]),
  step("tools/call structured", "tools/call", toolArgs("get-structured-content", { location: "Chicago" }), (r) => [
    typeof r.structuredContent?.temperature === "number",
    JSON.stringify(r.structuredContent ?? null),
  ]),
  step("prompts/list", "prompts/list", [], (r) => [
    r.prompts.some((p) => p.name === "simple-prompt"),
    `${r.prompts.length} prompts`,
  ]),
  step("prompts/get", "prompts/get", ["--prompt-name", "simple-prompt"], (r) => [
    r.messages.length > 0,
    `${r.messages.length} messages`,
  ]),
  step("resources/read", "resources/read", ["--uri", firstUri], (r) => [
    r.contents.length > 0,
    `${firstUri}: ${r.contents.length} contents`,
  ]),
  step("resources/templates/list", "resources/templates/list", [], (r) => [
    r.resourceTemplates.length > 0,
    `${r.resourceTemplates.length} templates`,
  ]),
  step("logging/setLevel", "logging/setLevel", ["--log-level", "warning"], () => [true, "answered"]),
];
if (gateway) {
  steps.push(
    step("gw tools/list", "tools/list", [], (r) => {
      const names = r.tools.map((t) => t.name);
      const missing = GW_TOOLS.filter((n) => !names.includes(n));
      return [missing.length === 0, missing.length ? `missing ${missing}` : "the seven gw_* tools"];
    }),
    step("gw_list_all_servers", "tools/call", toolArgs("gw_list_all_servers", {}),
      gwCheck((d) => (d.servers ?? []).some((s) => s.server_name === gateway))),
    step("gw_get_server_info", "tools/call", toolArgs("gw_get_server_info", { server_name: gateway }),
      gwCheck((d) => "server_info" in d)),
    step("gw_secure_call_tools echo", "tools/call",
      toolArgs("gw_secure_call_tools", { server_name: gateway, tool_calls: [{ name: "echo", args: { message: ECHO } }] }),
      gwCheck((d) => d.results?.[0]?.status === "success" && JSON.stringify(d.results[0]).includes(ECHO))),
  );
}
await Promise.all(steps);
for (const r of results) console.log(JSON.stringify(r));
