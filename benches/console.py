#!/usr/bin/env python3
"""How fast the console's pages answer with a large configuration (contract 18, issue 35: under 50 ms with 1,000
servers and 10,000 keys), through the release binary.

    python3 benches/console.py [--binary target/release/mcpgw] [--servers 1000] [--keys 10000] [--users 1000]
                               [--projects 100] [--rounds 20] [--audit-writes 2000]

Writes a configuration with SERVERS servers (ten MCP configurations of SERVERS/10; commands that are never started:
no client lists them), USERS users, PROJECTS projects (every user a member of one) and KEYS keys spread over them, an
audit log written by the gateway itself (admin writes: one user created and deleted AUDIT_WRITES / 2 times over the
admin API before the pages are timed, each write rewriting the whole configuration), starts `mcpgw serve` on it, signs in on the console as a browser does (the
sign-in page's CSRF token and cookie, then the session cookie), and times each page ROUNDS times on one keep-alive
connection. Printed per page: p50 and max of the answer's time (the whole body read), its size, and the ratio of the
p50 to the baseline measured in the same run: `GET /health` of the admin API (no sign-in, no page). The gateway's CPU
per page is read from /proc/<pid>/stat (10 ms ticks: over ROUNDS answers, +-10 ms / ROUNDS a page). The machine has 2
cores shared by this client and the gateway.
"""

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

ADMIN_KEY = "bench-admin-key-0123456789abcdefghijklmnop"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(servers, keys, users, projects, audit_path):
    configs = {}
    per_config = max(1, servers // 10)
    for c in range(10):
        entries = [{"server_name": f"s{c}-{i}", "config": {"command": "/bin/false", "args": [f"--n={i}"]}}
                   for i in range(per_config)]
        configs[f"cfg-{c}"] = {"mcp_config_name": f"config {c}", "mcp_config": entries}
    user_ids = [f"user-{u:05d}" for u in range(users)]
    project_list = {}
    for p in range(projects):
        members = user_ids[p::projects]
        project_list[f"proj-{p:04d}"] = {"project_name": f"project {p}", "mcp_config_id": f"cfg-{p % 10}",
                                         "users": members}
    apikeys = {}
    for k in range(keys):
        p = k % projects
        members = project_list[f"proj-{p:04d}"]["users"]
        apikeys[f"gwkey-bench-{k:08d}-0123456789abcdefghijklmnopqrstuvwxyz"] = {
            "project_id": f"proj-{p:04d}", "user_id": members[k % len(members)], "disabled": False}
    return {
        "admin_apikey": ADMIN_KEY,
        "common_mcp_gateway_config": {"gw_log_level": "WARNING",
                                      "audit_log": {"enabled": True, "path": audit_path}},
        "mcp_configs": configs,
        "projects": project_list,
        "users": {u: {"email": f"{u}@example.com"} for u in user_ids},
        "apikeys": apikeys,
    }


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Admin:
    """One keep-alive connection to the admin listener, with the console's cookies."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookies = {}

    def request(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        self.conn.request(method, path, body=body, headers=headers)
        answer = self.conn.getresponse()
        data = answer.read()
        for name, value in answer.getheaders():
            if name.lower() == "set-cookie":
                pair = value.split(";", 1)[0]
                k, _, v = pair.partition("=")
                if v:
                    self.cookies[k] = v
                else:
                    self.cookies.pop(k, None)
        return answer.status, data

    def sign_in(self):
        status, page = self.request("GET", "/ui/login")
        token = re.search(rb'name="csrf" value="([^"]+)"', page).group(1).decode()
        form = urllib.parse.urlencode({"admin_key": ADMIN_KEY, "csrf": token})
        status, _ = self.request("POST", "/ui/login", form,
                                 {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 303 and "mcpgw_console" in self.cookies, status


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/mcpgw")
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--audit-writes", type=int, default=2000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gw.json")
        audit = os.path.join(tmp, "audit.jsonl")
        with open(path, "w") as f:
            json.dump(config(args.servers, args.keys, args.users, args.projects, audit), f)
        admin_port, gateway_port, metrics_port = free_port(), free_port(), free_port()
        gw = subprocess.Popen([args.binary, "serve", "--config", path,
                               "--gateway-addr", f"127.0.0.1:{gateway_port}",
                               "--admin-addr", f"127.0.0.1:{admin_port}",
                               "--metrics-addr", f"127.0.0.1:{metrics_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while True:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=2)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    sys.exit("mcpgw did not start")
                time.sleep(0.05)
            # An audit log of AUDIT_WRITES records: admin writes.
            api = Admin(admin_port)
            auth = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
            for i in range(args.audit_writes // 2):
                status, body = api.request("POST", "/api/v1/users", json.dumps({"email": f"churn{i}@example.com"}),
                                           auth)
                user = json.loads(body)["data"]["user_id"]
                api.request("DELETE", f"/api/v1/users/{user}", None, auth)
            console = Admin(admin_port)
            console.sign_in()
            pages = ["/health", "/ui/", "/ui/servers", "/ui/servers/cfg-3/s3-7", "/ui/configs", "/ui/projects",
                     "/ui/users", "/ui/users/user-00042", "/ui/keys", "/ui/policies", "/ui/audit",
                     "/ui/audit?outcome=success&limit=100", "/ui/playground", "/ui/clients"]
            results = {}
            for page in pages:
                for _ in range(3):
                    console.request("GET", page)
                times, size = [], 0
                ticks = cpu_ticks(gw.pid)
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    status, body = console.request("GET", page)
                    times.append(time.perf_counter() - start)
                    assert status == 200, (page, status, body[:300])
                    size = len(body)
                cpu_ms = (cpu_ticks(gw.pid) - ticks) * 10 / args.rounds
                results[page] = (statistics.median(times) * 1000, max(times) * 1000, size, cpu_ms)
            base = results["/health"][0]
            print(f"console pages: {args.servers} servers, {args.keys} keys, {args.users} users, "
                  f"{args.projects} projects, {args.audit_writes} audit records; {args.rounds} answers a page; "
                  f"2 cores shared by client and gateway; load {os.getloadavg()[0]:.2f}")
            print(f"{'page':42} {'p50 ms':>8} {'max ms':>8} {'x /health':>10} {'bytes':>9} {'CPU ms':>7}")
            for page, (p50, worst, size, cpu) in results.items():
                print(f"{page:42} {p50:8.2f} {worst:8.2f} {p50 / base:10.1f} {size:9} {cpu:7.2f}")
            slowest = max((r[0], p) for p, r in results.items())
            print(f"slowest p50: {slowest[1]} {slowest[0]:.2f} ms (goal: under 50 ms)")
        finally:
            gw.terminate()
            gw.wait(timeout=30)


if __name__ == "__main__":
    main()
