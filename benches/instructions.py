#!/usr/bin/env python3
"""Instructions per call of the gateway, counted by valgrind's callgrind: a figure that does not move with the load of
this 2-core machine, unlike CPU time read from /proc (the gateway bench's figure), so that two builds can be compared
to within a percent or two (issue 31: the boundary's cost per call against the build before it).

    python3 benches/instructions.py BUILD [BUILD ...] [--calls N] [--rounds R]

Each BUILD is an `mcpgw` binary (e.g. `target/release/mcpgw` and one built from an older commit). For each round and
each build in turn, it starts `mcpgw serve` under `valgrind --tool=callgrind` with the gateway bench's configuration
(the mock upstream, `tool_exposure` "both"), opens a session (2025-11-25) with one keep-alive connection, makes 200
warm-up calls, zeroes the counters (`callgrind_control -z`), makes N calls (default 2000) and dumps them
(`callgrind_control -d`): the instructions the gateway process executed (all its threads), divided by N. Three kinds of
call, each measured on its own: `gw_secure_call_tools` of the mock's `echo` (gateway mode), the transparent
`tools/call` of `mock__echo`, and `gw_secure_call_tools` on the server behind guardrails (keywords, PII redaction).
`--audit` turns the audit log on (a file in the run's temporary folder: one hash-chained record per call).
`--production` sets the production defaults of logs and traces instead of the bench's quiet ones: INFO logs and
spans exported by the `stdout` telemetry provider (both to stderr, a file in the run's temporary folder).
Upstream processes are not traced; `MCPGW_INSTRUCTIONS_KEEP=DIR` keeps each dump there (for `callgrind_annotate`); the mock upstream is this checkout's `target/release/mcpgw-mock-upstream` for every
build (or `MCPGW_MOCK_UPSTREAM`). Needs `valgrind` (Debian's package). Each round takes a minute or two per build and kind.
"""

import argparse
import glob
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_gateway import free_port, wait_ready

# The allocator options `mcpgw` would otherwise set by starting itself again (src/main.rs), which valgrind would not
# follow.
JEMALLOC = ("narenas:1,tcache_nslots_small_max:16,tcache_nslots_large:2,tcache_gc_incr_bytes:8192,"
            "dirty_decay_ms:0,muzzy_decay_ms:0")
KEY = "gw_bench-key-0000000000000000000000000000000000000"
HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.environ.get("MCPGW_MOCK_UPSTREAM") or os.path.join(HERE, "..", "target", "release", "mcpgw-mock-upstream")



def config(directory, audit=False, production=False):
    mock = {"command": os.path.abspath(MOCK), "args": []}
    common = {"gw_log_level": "INFO" if production else "WARNING", "tool_exposure": "both",
              "upstream_pool": {"max_processes_per_server": 1}}
    if audit:
        common["audit_log"] = {"enabled": True, "path": os.path.join(directory, "audit.jsonl")}
    plugins = {"guardrails": {"provider": "custom_keyword", "config": {"blocked_keywords": ["drop table", "rm -rf"]}}}
    if production:
        plugins["telemetry"] = {"provider": "stdout", "config": {"enabled": True}}
    return {
        "admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop",
        "common_mcp_gateway_config": common,
        "plugins": plugins,
        "mcp_configs": {"c1": {"mcp_config_name": "bench", "mcp_config": [
            {"server_name": "mock", "config": mock},
            {"server_name": "guarded", "config": mock,
             "input_guardrails_policy": {"enabled": True, "additional_config": {"pii_redaction": True}},
             "output_guardrails_policy": {"enabled": True, "additional_config": {"blocked_keywords": ["secret"]}}}]}},
        "projects": {"p1": {"project_name": "bench", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "bench@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}},
    }


class Session:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        answer, headers = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "instructions", "version": "1"}}})
        self.headers["Mcp-Session-Id"] = headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        self.conn.request("POST", "/mcp/", json.dumps(body), self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return data, {k.lower(): v for k, v in response.getheaders()}

    def call(self, kind, n):
        if kind == "transparent":
            params = {"name": "mock__echo", "arguments": {"text": "hello %d" % n}}
        else:
            server = "guarded" if kind == "guarded" else "mock"
            params = {"name": "gw_secure_call_tools", "arguments": {"server_name": server, "tool_calls": [
                {"name": "echo", "args": {"text": "hello %d from bob@example.com" % n}}]}}
        data, _ = self.post({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": params})
        if b"hello %d" % n not in data:
            sys.exit("unexpected answer: %r" % data[:300])


def measure(binary, kind, calls, audit=False, production=False):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "gw.json")
        with open(path, "w") as f:
            json.dump(config(directory, audit, production), f)
        # Not beside the configuration: the gateway watches that folder, and each write would be an event for it.
        os.makedirs(os.path.join(directory, "logs"))
        log = open(os.path.join(directory, "logs", "gateway.log"), "w")
        port, metrics = free_port(), free_port()
        out = os.path.join(directory, "callgrind.out")
        gateway = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + ".%p", binary, "serve", "--config", path,
             "--gateway-addr", "127.0.0.1:%d" % port, "--admin-addr", "127.0.0.1:0",
             "--metrics-addr", "127.0.0.1:%d" % metrics, "--shutdown-grace", "1"],
            stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, _RJEM_MALLOC_CONF=JEMALLOC))
        try:
            wait_ready(metrics, 120, poll=0.2, what="the gateway under valgrind")
            session = Session(port)
            for n in range(200):
                session.call(kind, n)
            subprocess.run(["callgrind_control", "-z", str(gateway.pid)], check=True, stdout=subprocess.DEVNULL)
            for n in range(calls):
                session.call(kind, n)
            subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, stdout=subprocess.DEVNULL)
            instructions = 0
            keep = os.environ.get("MCPGW_INSTRUCTIONS_KEEP")
            for dump in glob.glob(out + ".*"):
                if keep:
                    # For `callgrind_annotate`: where the instructions went.
                    name = "%s-%s.%s" % (os.path.basename(binary), kind, os.path.basename(dump))
                    shutil.copy(dump, os.path.join(keep, name))
                with open(dump) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            instructions += int(line.split()[1])
                            break
            # The dump after zeroing holds the calls; the file written at the start holds nothing yet (valgrind
            # writes its final dump at exit, after this).
            return instructions / calls
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)
            log.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("builds", nargs="+")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default="gateway,transparent,guarded")
    parser.add_argument("--audit", action="store_true", help="with the audit log on")
    parser.add_argument("--production", action="store_true", help="INFO logs and spans to stderr")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    figures = {(b, k): [] for b in args.builds for k in kinds}
    for round_ in range(args.rounds):
        builds = args.builds if round_ % 2 == 0 else list(reversed(args.builds))
        for kind in kinds:
            for build in builds:
                per_call = measure(build, kind, args.calls, args.audit, args.production)
                figures[(build, kind)].append(per_call)
                print("round %d, %s, %s: %.0f instructions per call" % (round_ + 1, kind, build, per_call), flush=True)
    print("mean instructions per call (gateway process, all threads; %d calls after 200 warm-up):" % args.calls)
    for kind in kinds:
        row = []
        for build in args.builds:
            values = figures[(build, kind)]
            row.append(sum(values) / len(values))
        ratio = " (%.3f of the first)" % (row[-1] / row[0]) if len(row) > 1 else ""
        print("  %s: %s%s" % (kind, ", ".join("%.0f" % v for v in row), ratio))


main()
