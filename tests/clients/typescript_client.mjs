// One client of the client matrix (tests/client_matrix.rs): the official MCP TypeScript SDK's client
// (npm `@modelcontextprotocol/sdk`), over streamable HTTP (StreamableHTTPClientTransport) or stdio
// (StdioClientTransport).
//
// Runs the matrix's fixed steps against one server and prints one JSON line per step:
// `{"step": name, "ok": true|false, "detail": "..."}`. It never stops at a failed step: every step is tried.
//
//   node typescript_client.mjs [--gateway SERVER] --http URL [--header "Name: value" ...]
//   node typescript_client.mjs [--gateway SERVER] [--env NAME=VALUE ...] --stdio -- COMMAND [ARG ...]
//
// MCP_SDK_DIR names the directory holding `node_modules/@modelcontextprotocol/sdk` (the test installs it into
// target/npm-peers/clients). `--gateway SERVER` adds the gateway view's steps: the seven `gw_*` tools listed, and
// `gw_list_all_servers`, `gw_get_server_info` and `gw_secure_call_tools` (`echo` of SERVER).

import path from "node:path";
import { pathToFileURL } from "node:url";

const sdk = path.join(process.env.MCP_SDK_DIR ?? ".", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm");
const load = (file) => import(pathToFileURL(path.join(sdk, file)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { StdioClientTransport, getDefaultEnvironment } = await load("client/stdio.js");

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
let command = null;
const headers = {};
const env = {};
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--http") url = args[++i];
  else if (args[i] === "--header") {
    const [name, ...value] = args[++i].split(": ");
    headers[name] = value.join(": ");
  } else if (args[i] === "--env") {
    const [name, ...value] = args[++i].split("=");
    env[name] = value.join("=");
  } else if (args[i] === "--gateway") gateway = args[++i];
  else if (args[i] === "--stdio") {
    command = args.slice(i + 1);
    if (command[0] === "--") command = command.slice(1);
    break;
  }
}

const report = (step, ok, detail = "") =>
  console.log(JSON.stringify({ step, ok: Boolean(ok), detail: String(detail).slice(0, 300) }));
const textOf = (result) => (result.content ?? []).map((c) => c.text ?? "").join(" ");

async function step(name, action) {
  try {
    const [ok, detail] = await action();
    report(name, ok, detail);
  } catch (e) {
    report(name, false, `${e?.name ?? "Error"}: ${e?.message ?? e}`);
  }
}

const options = { timeout: 60_000 };
const client = new Client({ name: "client-matrix-typescript", version: "1.0.0" }, { capabilities: {} });
const transport = url
  ? new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } })
  : new StdioClientTransport({
      command: command[0],
      args: command.slice(1),
      // The SDK's default environment (PATH, HOME, ...) plus `--env`: the gateway's stdio credentials.
      env: { ...getDefaultEnvironment(), ...env },
      stderr: "ignore",
    });

// The SDK tells the transport the negotiated revision; noted for the initialize step's detail.
let negotiated = "?";
const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (version) => {
  negotiated = version;
  setProtocolVersion?.(version);
};

try {
  await client.connect(transport, options);
  report("initialize", true, `protocol ${negotiated}`);
} catch (e) {
  report("initialize", false, `${e?.name ?? "Error"}: ${e?.message ?? e}`);
  process.exit(0);
}

await step("tools/list", async () => {
  const names = (await client.listTools(undefined, options)).tools.map((t) => t.name);
  return [names.includes("echo"), `${names.length} tools`];
});
await step("tools/call echo", async () => {
  const result = await client.callTool({ name: "echo", arguments: { message: ECHO } }, undefined, options);
  return [textOf(result).includes(ECHO) && !result.isError, textOf(result)];
});
await step("tools/call structured", async () => {
  const result = await client.callTool(
    { name: "get-structured-content", arguments: { location: "Chicago" } },
    undefined,
    options,
  );
  const data = result.structuredContent ?? {};
  return [typeof data.temperature === "number", JSON.stringify(data)];
});
await step("prompts/list", async () => {
  const names = (await client.listPrompts(undefined, options)).prompts.map((p) => p.name);
  return [names.includes("simple-prompt"), `${names.length} prompts`];
});
await step("prompts/get", async () => {
  const result = await client.getPrompt({ name: "simple-prompt" }, options);
  return [result.messages.length > 0, `${result.messages.length} messages`];
});
let firstUri = "demo://resource/static/document/features.md";
await step("resources/list", async () => {
  const resources = (await client.listResources(undefined, options)).resources;
  if (resources.length) firstUri = resources[0].uri;
  return [resources.length > 0, `${resources.length} resources`];
});
await step("resources/read", async () => {
  const contents = (await client.readResource({ uri: firstUri }, options)).contents;
  return [contents.length > 0, `${firstUri}: ${contents.length} contents`];
});
await step("resources/templates/list", async () => {
  const templates = (await client.listResourceTemplates(undefined, options)).resourceTemplates;
  return [templates.length > 0, `${templates.length} templates`];
});
await step("completion/complete", async () => {
  const result = await client.complete(
    { ref: { type: "ref/prompt", name: "completable-prompt" }, argument: { name: "department", value: "Eng" } },
    options,
  );
  return [result.completion.values.includes("Engineering"), JSON.stringify(result.completion.values)];
});
await step("logging/setLevel", async () => {
  await client.setLoggingLevel("warning", options);
  return [true, "answered"];
});
await step("ping", async () => {
  await client.ping(options);
  return [true, "answered"];
});

if (gateway) {
  const gwCall = async (tool, toolArgs, check) => {
    const result = await client.callTool({ name: tool, arguments: toolArgs }, undefined, options);
    const data = result.structuredContent ?? {};
    return [data.status === "success" && !result.isError && check(data), textOf(result)];
  };
  await step("gw tools/list", async () => {
    const names = (await client.listTools(undefined, options)).tools.map((t) => t.name);
    const missing = GW_TOOLS.filter((n) => !names.includes(n));
    return [missing.length === 0, missing.length ? `missing ${missing}` : "the seven gw_* tools"];
  });
  await step("gw_list_all_servers", () =>
    gwCall("gw_list_all_servers", {}, (d) => (d.servers ?? []).some((s) => s.server_name === gateway)),
  );
  await step("gw_get_server_info", () =>
    gwCall("gw_get_server_info", { server_name: gateway }, (d) => "server_info" in d),
  );
  await step("gw_secure_call_tools echo", () =>
    gwCall(
      "gw_secure_call_tools",
      { server_name: gateway, tool_calls: [{ name: "echo", args: { message: ECHO } }] },
      (d) => d.results?.[0]?.status === "success" && JSON.stringify(d.results[0]).includes(ECHO),
    ),
  );
}

try {
  if (url) await transport.terminateSession();
  await client.close();
} catch (e) {
  report("close", false, `${e?.name ?? "Error"}: ${e?.message ?? e}`);
}
process.exit(0);
