"""One client of the client matrix (tests/client_matrix.rs): the official MCP Python SDK (PyPI `mcp`).

Runs the matrix's fixed steps against one server and prints one JSON line per step:
`{"step": name, "ok": true|false, "detail": "..."}`. It never stops at a failed step: every step is tried.

    python_client.py --mode default|legacy [--gateway SERVER] --http URL [--header "Name: value" ...]
    python_client.py --mode default|legacy [--gateway SERVER] [--env NAME=VALUE ...] --stdio -- COMMAND [ARG ...]

`--mode default` is the SDK's default (`Client(mode="auto")`: it probes `server/discover` and speaks 2026-07-28 where
the server offers it, else falls back to `initialize`); `--mode legacy` is `Client(mode="legacy")`, the `initialize`
handshake at the newest handshake revision (2025-11-25). `--gateway SERVER` adds the gateway view's steps: the seven
`gw_*` tools listed, and `gw_list_all_servers`, `gw_get_server_info` and `gw_secure_call_tools` (`echo` of SERVER).
"""

import argparse
import asyncio
import json
import sys
import warnings

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PromptReference

# ping and logging/setLevel are deprecated at 2026-07-28 and warn; the matrix still sends them, as a user's code does.
warnings.simplefilter("ignore")

GW_TOOLS = [
    "gw_list_all_servers",
    "gw_get_server_info",
    "gw_discover_all_tools",
    "gw_secure_call_tools",
    "gw_get_cache_status",
    "gw_clear_cache",
    "gw_get_timeout_metrics",
]
ECHO = "hello from the client matrix"


def report(step, ok, detail=""):
    print(json.dumps({"step": step, "ok": bool(ok), "detail": str(detail)[:300]}), flush=True)


def text_of(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


async def step(name, action):
    """Runs one step: `action` returns (ok, detail) or raises."""
    try:
        ok, detail = await action()
    except BaseException as e:  # noqa: BLE001 - a failed step is reported, never fatal
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        ok, detail = False, f"{type(e).__name__}: {e}"
    report(name, ok, detail)
    return ok


async def run_steps(client, gateway):
    report("initialize", True, f"protocol {client.protocol_version}")

    async def tools_list():
        names = [t.name for t in (await client.list_tools()).tools]
        return "echo" in names, f"{len(names)} tools"

    async def call_echo():
        result = await client.call_tool("echo", {"message": ECHO})
        return (ECHO in text_of(result) and not result.is_error), text_of(result)

    async def call_structured():
        result = await client.call_tool("get-structured-content", {"location": "Chicago"})
        data = result.structured_content or {}
        return (isinstance(data, dict) and "temperature" in data), json.dumps(data)

    async def prompts_list():
        names = [p.name for p in (await client.list_prompts()).prompts]
        return "simple-prompt" in names, f"{len(names)} prompts"

    async def prompts_get():
        result = await client.get_prompt("simple-prompt")
        return len(result.messages) > 0, f"{len(result.messages)} messages"

    uri = {}

    async def resources_list():
        resources = (await client.list_resources()).resources
        if resources:
            uri["first"] = str(resources[0].uri)
        return len(resources) > 0, f"{len(resources)} resources"

    async def resources_read():
        target = uri.get("first", "demo://resource/static/document/features.md")
        contents = (await client.read_resource(target)).contents
        return len(contents) > 0, f"{target}: {len(contents)} contents"

    async def templates_list():
        templates = (await client.list_resource_templates()).resource_templates
        return len(templates) > 0, f"{len(templates)} templates"

    async def complete():
        result = await client.complete(PromptReference(name="completable-prompt"), {"name": "department", "value": "Eng"})
        return "Engineering" in result.completion.values, json.dumps(result.completion.values)

    async def set_level():
        await client.set_logging_level("warning")
        return True, "answered"

    async def ping():
        await client.send_ping()
        return True, "answered"

    await step("tools/list", tools_list)
    await step("tools/call echo", call_echo)
    await step("tools/call structured", call_structured)
    await step("prompts/list", prompts_list)
    await step("prompts/get", prompts_get)
    await step("resources/list", resources_list)
    await step("resources/read", resources_read)
    await step("resources/templates/list", templates_list)
    await step("completion/complete", complete)
    await step("logging/setLevel", set_level)
    await step("ping", ping)

    if gateway:

        async def gw_tools():
            names = [t.name for t in (await client.list_tools()).tools]
            missing = [n for n in GW_TOOLS if n not in names]
            return not missing, f"missing {missing}" if missing else "the seven gw_* tools"

        async def gw_call(tool, args, check):
            result = await client.call_tool(tool, args)
            data = result.structured_content or {}
            return (data.get("status") == "success" and not result.is_error and check(data)), text_of(result)

        await step("gw tools/list", gw_tools)
        await step(
            "gw_list_all_servers",
            lambda: gw_call(
                "gw_list_all_servers", {}, lambda d: any(s.get("server_name") == gateway for s in d.get("servers", []))
            ),
        )
        await step(
            "gw_get_server_info",
            lambda: gw_call("gw_get_server_info", {"server_name": gateway}, lambda d: "server_info" in d),
        )
        await step(
            "gw_secure_call_tools echo",
            lambda: gw_call(
                "gw_secure_call_tools",
                {"server_name": gateway, "tool_calls": [{"name": "echo", "args": {"message": ECHO}}]},
                lambda d: d["results"][0]["status"] == "success" and ECHO in json.dumps(d["results"][0]),
            ),
        )


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["default", "legacy"], default="default")
    parser.add_argument("--gateway", metavar="SERVER")
    parser.add_argument("--http")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the stdio server")
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()

    if args.http:
        headers = dict(h.split(": ", 1) for h in args.header)
        transport = streamable_http_client(args.http, http_client=httpx2.AsyncClient(headers=headers, timeout=60))
    else:
        env = dict(e.split("=", 1) for e in args.env)
        transport = stdio_client(StdioServerParameters(command=args.command[0], args=args.command[1:], env=env))

    mode = "auto" if args.mode == "default" else "legacy"
    connected = False
    try:
        async with Client(transport, mode=mode, read_timeout_seconds=60) as client:
            connected = True
            await run_steps(client, args.gateway)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        # Before the handshake completed it is initialize that failed; after it, closing the session.
        report("close" if connected else "initialize", False, f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
