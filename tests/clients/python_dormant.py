"""A session of the official MCP Python SDK (PyPI `mcp`, `Client(mode="legacy")`: the `initialize` handshake, then
the SDK holds its session's GET stream open) that goes dormant at the gateway (`limits.session_dormant_seconds`) and
is still told, on that stream, that its tools changed; then it lists them again (tests/client_matrix.rs).

    python_dormant.py URL KEY METRICS_URL

Prints one JSON line per step (`{"step": name, "ok": true|false, "detail": "..."}`): `connected` (the tools it
lists), `dormant` (the gateway's metrics show its session dormant with its stream open), then, once a line comes on
stdin (the test changed what the key sees), `told` (a `notifications/tools/list_changed` arrived) and `listed` (the
tools listed again, more than before).
"""

import asyncio
import json
import sys
import time
import urllib.request
import warnings

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

warnings.simplefilter("ignore")


def report(step, ok, detail=""):
    print(json.dumps({"step": step, "ok": bool(ok), "detail": str(detail)[:300]}), flush=True)


def metric(url, name):
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def main():
    url, key, metrics = sys.argv[1], sys.argv[2], sys.argv[3]
    told = asyncio.Event()

    async def on_message(message):
        if "notifications/tools/list_changed" in repr(message) or type(message).__name__ == "ToolListChangedNotification":
            told.set()
        root = getattr(message, "root", None)
        if root is not None and getattr(root, "method", None) == "notifications/tools/list_changed":
            told.set()

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode="legacy", read_timeout_seconds=60, message_handler=on_message) as client:
        before = len((await client.list_tools()).tools)
        report("connected", True, f"{before} tools, protocol {client.protocol_version}")
        deadline = time.monotonic() + 30
        seen = (None, None)
        while time.monotonic() < deadline:
            seen = (metric(metrics, "mcpgw_sessions_dormant"), metric(metrics, "mcpgw_session_streams"))
            if seen == (1.0, 1.0):
                break
            await asyncio.sleep(0.2)
        report("dormant", seen == (1.0, 1.0), f"dormant, streams: {seen}")
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        try:
            await asyncio.wait_for(told.wait(), 30)
            report("told", True, "notifications/tools/list_changed")
        except asyncio.TimeoutError:
            report("told", False, "no notifications/tools/list_changed within 30 s")
        after = len((await client.list_tools()).tools)
        report("listed", after > before, f"{before} -> {after} tools")


if __name__ == "__main__":
    asyncio.run(main())
