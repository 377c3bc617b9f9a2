#!/usr/bin/env python3
"""The cost of a per-user call (contract 16, kind `secret`) against a shared one, and the memory of each connected user.

    python3 benches/per_user.py [--binary target/release/mcpgw] [--users 8] [--calls 2000]

One `mcpgw serve` with two copies of the mock upstream in one configuration: `shared` (today's behaviour) and `mine`
(`credentials: {"mode": "per_user", "kind": "secret", "names": ["TOKEN"]}`, `${user.TOKEN}` in its `env`). USERS users
are created through the admin API, each with a key and a value of TOKEN (sealed by the gateway). Each user opens a
2025-11-25 session and calls `gw_secure_call_tools` (the mock's `echo`) on `shared`, then on `mine`, one call at a time
(c=1, keep-alive), CALLS calls per server per round-robin over the users. Printed: p50 of each, the gateway's CPU per
call read from /proc (utime+stime over the calls), and RSS: the gateway's and the upstream processes' after the
shared calls and after the per-user ones (one process per user: the per-user memory is mostly that process). The
mock upstream is `target/release/mcpgw-mock-upstream` next to the binary (or `MCPGW_MOCK_UPSTREAM`).
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

ADMIN = "bench-admin-key-0123456789abcdefghijklmnop"
HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")



def config(mock):
    mine = {"server_name": "mine", "config": {"command": mock, "env": {"MOCK_TOKEN": "${user.TOKEN}"}},
            "credentials": {"mode": "per_user", "kind": "secret", "names": ["TOKEN"]}}
    return {
        "admin_apikey": ADMIN,
        "common_mcp_gateway_config": {"gw_log_level": "WARNING",
                                      "secrets_key": "bench-secrets-key-0123456789abcdefghijklmnopq",
                                      "rate_limits": {"per_key_requests_per_second": 0}},
        "mcp_configs": {"c1": {"mcp_config_name": "bench",
                               "mcp_config": [{"server_name": "shared", "config": {"command": mock}}, mine]}},
        "projects": {"p1": {"project_name": "bench", "mcp_config_id": "c1", "users": []}},
        "users": {},
        "apikeys": {},
    }


def admin(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, json.dumps(body) if body is not None else None,
                 {"Authorization": "Bearer " + ADMIN, "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        sys.exit("%s %s: %d %s" % (method, path, response.status, data[:300]))
    return json.loads(data).get("data") if data else None




class Session:
    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        _, answer = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        self.headers["Mcp-Session-Id"] = answer["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        self.conn.request("POST", "/mcp/", json.dumps(body), self.headers)
        response = self.conn.getresponse()
        return response.read(), {k.lower(): v for k, v in response.getheaders()}

    def call(self, server, text):
        args = {"server_name": server, "tool_calls": [{"name": "echo", "args": {"text": text}}]}
        data, _ = self.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "gw_secure_call_tools", "arguments": args}})
        result = answer_of(data)["result"]
        if result.get("isError") or text not in json.dumps(result):
            sys.exit("call of %s failed: %s" % (server, json.dumps(result)[:400]))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid):
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                pass
    return found


def timed(sessions, server, calls):
    times = []
    for i in range(calls):
        session = sessions[i % len(sessions)]
        started = time.perf_counter()
        session.call(server, "hello %d" % i)
        times.append(time.perf_counter() - started)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "target", "release", "mcpgw"))
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    mock = os.path.abspath(os.environ.get("MCPGW_MOCK_UPSTREAM")
                           or os.path.join(os.path.dirname(binary), "mcpgw-mock-upstream"))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "gw.json")
        with open(path, "w") as f:
            json.dump(config(mock), f)
        port, admin_port, metrics = free_port(), free_port(), free_port()
        gateway = subprocess.Popen(
            [binary, "serve", "--config", path, "--gateway-addr", "127.0.0.1:%d" % port, "--admin-addr",
             "127.0.0.1:%d" % admin_port, "--metrics-addr", "127.0.0.1:%d" % metrics, "--shutdown-grace", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(metrics, 60)
            keys = []
            for n in range(args.users):
                user = admin(admin_port, "POST", "/api/v1/users", {"email": "u%d@example.com" % n})["user_id"]
                admin(admin_port, "POST", "/api/v1/projects/p1/users", {"user_id": user})
                keys.append(admin(admin_port, "POST", "/api/v1/users/%s/api-keys" % user,
                                  {"project_id": "p1"})["api_key"])
                admin(admin_port, "PUT", "/api/v1/users/%s/credentials/c1/mine" % user,
                      {"values": {"TOKEN": "token-of-user-%d" % n}})
            time.sleep(1.0)  # the writes' reload
            sessions = [Session(port, key) for key in keys]
            for session in sessions:
                session.call("shared", "warm")
            shared_only = rss_mib(gateway.pid)
            for session in sessions:  # every user's process started
                session.call("mine", "warm")
            print("gateway RSS with %d sessions on the shared server %.1f MiB, after each user's first per-user call "
                  "%.1f MiB (%.0f KiB per user)" % (args.users, shared_only, rss_mib(gateway.pid),
                                                    (rss_mib(gateway.pid) - shared_only) * 1024 / args.users))
            upstream_rss = lambda: sum(rss_mib(p) for p in children(gateway.pid))
            print("after warm-up: gateway RSS %.1f MiB, %d upstream processes %.1f MiB (1 shared + %d per-user)" %
                  (rss_mib(gateway.pid), len(children(gateway.pid)), upstream_rss(), args.users))
            results = {}
            for server in ("shared", "mine", "shared", "mine"):  # interleaved rounds, the last of each kept
                before = cpu_seconds(gateway.pid)
                times = timed(sessions, server, args.calls)
                used = cpu_seconds(gateway.pid) - before
                results[server] = (statistics.median(times) * 1e3, used / args.calls * 1e6)
            for server, (p50, cpu) in results.items():
                print("%-6s p50 %.3f ms  gateway CPU %.0f us/call  (%d calls over %d users, c=1)" %
                      (server, p50, cpu, args.calls, args.users))
            (sp, sc), (mp, mc) = results["shared"], results["mine"]
            print("per-user / shared: p50 %.2fx, CPU %.2fx" % (mp / sp, mc / sc))
            print("per connected user: one upstream process of ~%.1f MiB RSS" %
                  (upstream_rss() / max(1, len(children(gateway.pid)))))
        finally:
            gateway.terminate()
            gateway.wait(30)


if __name__ == "__main__":
    main()
