#!/usr/bin/env python3
"""A transparent `tools/list` over five cold servers (contract 15, "One slow server does not stall the others"): the
gateway starts the five at once and answers in about the time of the slowest, not the sum of their starts.

    python3 benches/cold_listing.py [--binary target/release/mcpgw] [--rounds 3]

Each round starts `mcpgw serve` afresh with five mock upstreams (`mcpgw-mock-upstream --start-delay-ms` 1000 to 5000:
each waits that long before it answers `initialize`, as an `npx` server does while it downloads), opens a 2025-11-25
session and times its first `tools/list` (every server cold). It prints that time next to the same-run baselines: the
slowest server's start alone (5 s, the floor of a parallel listing) and the sum of the five (15 s, what listing them
one after another costs). `discovery_timeout` is 30 s by default so that no server is left out; with
`--discovery-timeout 2.5` the first answer comes at 2.5 s with the two servers ready by then. The mock upstream is
`target/release/mcpgw-mock-upstream` next to the binary (or `MCPGW_MOCK_UPSTREAM`).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_gateway import answer_of, free_port, wait_ready

KEY = "gw_bench-key-0000000000000000000000000000000000000"
HERE = os.path.dirname(os.path.abspath(__file__))
DELAYS_MS = [1000, 2000, 3000, 4000, 5000]



def config(mock, discovery_timeout):
    servers = [{"server_name": "s%d" % (i + 1), "config": {"command": mock, "args": ["--start-delay-ms", str(ms)]}}
               for i, ms in enumerate(DELAYS_MS)]
    return {
        "admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop",
        "common_mcp_gateway_config": {"gw_log_level": "WARNING", "tool_exposure": "transparent",
                                      "timeout_settings": {"discovery_timeout": discovery_timeout}},
        "mcp_configs": {"c1": {"mcp_config_name": "bench", "mcp_config": servers}},
        "projects": {"p1": {"project_name": "bench", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "bench@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}},
    }


def post(conn, headers, body):
    conn.request("POST", "/mcp/", json.dumps(body), headers)
    response = conn.getresponse()
    return response.read(), {k.lower(): v for k, v in response.getheaders()}




def one_round(binary, mock, discovery_timeout):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "gw.json")
        with open(path, "w") as f:
            json.dump(config(mock, discovery_timeout), f)
        port, metrics = free_port(), free_port()
        gateway = subprocess.Popen(
            [binary, "serve", "--config", path, "--gateway-addr", "127.0.0.1:%d" % port, "--admin-addr",
             "127.0.0.1:0", "--metrics-addr", "127.0.0.1:%d" % metrics, "--shutdown-grace", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(metrics, 60)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            headers = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream"}
            _, answer = post(conn, headers, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
            headers["Mcp-Session-Id"] = answer["mcp-session-id"]
            headers["MCP-Protocol-Version"] = "2025-11-25"
            post(conn, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            started = time.monotonic()
            data, _ = post(conn, headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            took = time.monotonic() - started
            listed = {tool["name"].split("__")[0] for tool in answer_of(data)["result"]["tools"]}
            ready = {"s%d" % (i + 1) for i, ms in enumerate(DELAYS_MS) if ms < discovery_timeout * 1000}
            if listed != ready:
                sys.exit("listed %s, expected %s" % (sorted(listed), sorted(ready)))
            return took
        finally:
            gateway.terminate()
            gateway.wait(30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "target", "release", "mcpgw"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--discovery-timeout", type=float, default=30,
                        help="seconds; below 5 the slower servers are left out of the first answer")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    mock = os.environ.get("MCPGW_MOCK_UPSTREAM") or os.path.join(os.path.dirname(binary), "mcpgw-mock-upstream")
    times = [one_round(binary, os.path.abspath(mock), args.discovery_timeout) for _ in range(args.rounds)]
    median = statistics.median(times)
    slowest, total = max(DELAYS_MS) / 1000, sum(DELAYS_MS) / 1000
    print("first tools/list over 5 cold servers (starts 1..5 s, discovery_timeout %g s): median %.2f s of %s" %
          (args.discovery_timeout, median, ", ".join("%.2f" % t for t in times)))
    print("slowest server's start alone: %.1f s  ratio %.2fx" % (slowest, median / slowest))
    print("the five starts one after another: %.1f s  ratio %.2fx" % (total, median / total))


if __name__ == "__main__":
    main()
