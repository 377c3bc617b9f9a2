#!/usr/bin/env python3
"""The cost per call of authorization rules and quotas (contract 17, issue 34), end to end through the release binary.

    python3 benches/policy.py [--binary target/release/mcpgw] [--calls 20000] [--rounds 20] [--warmup 500]
                              [--variants none,none2,rules10,rules1000,quota,redis,quota_redis]
    python3 benches/policy.py --instructions [--calls 1000] [--variants ...] [--dumps DIR]

One `mcpgw serve` per variant, all started in the same run, each with its own mock upstream (one process), one key
and its config file in a directory of its own (a gateway watches its config's directory); each variant differs from
`none` in one thing only:

- `none`: no policies, no quotas (the baseline);
- `none2`: a second gateway with `none`'s configuration: the A/A check (its difference to `none` is the method's
  noise: two processes of one binary, measured alike);
- `rules10`, `rules1000`: 10 or 1,000 rules in `common_mcp_gateway_config.policies`, none matching the call, default
  `allow` (the worst case: every rule is evaluated). Rule `n` is shape `n % 10` of `benches/policy.rs` (the same
  strings);
- `quota`: one quota `{"name": "q", "per": "key", "rate": "1000000/second"}`, counted in memory (no Redis);
- `redis`: no quota, `gw_mcp_use_external_cache` on: what `quota_redis` pays besides the quota (the external cache
  reads the server's tool list from Redis at each call, and the usage counts go to Redis once a second);
- `quota_redis`: the quota, counted in Redis (`gw_mcp_use_external_cache`, a `redis-server` this script starts on a
  free port with `--save '' --appendonly no`; one Lua script per call).

Each client opens a 2025-11-25 session (keep-alive) and calls `gw_secure_call_tools` with the mock's `echo`, one call
at a time (c=1). The variants take turns in ROUNDS rounds (the order rotated each round), CALLS / ROUNDS calls each,
so that the machine's drift hits every variant alike. Printed per variant: p50 and p99 of the round trip, the ratio of
the p50 to `none`'s, and the gateway's CPU per call read from /proc/<pid>/stat (utime + stime over its calls; 10 ms
ticks: at about 100 us a call, 20,000 calls are about 200 ticks, so +-0.5 us a call), and its difference to `none`'s;
for the Redis variants also redis-server's CPU per call. The load average before and after is printed: the machine
has 2 cores shared by this client, the gateways, the upstreams and Redis, and a build running beside it shows there.

With `--instructions`, each variant's gateway runs in turn under valgrind's callgrind instead (as
`benches/instructions.py` does: 200 warm-up calls, counters zeroed, CALLS calls, counters dumped) and the instructions
per call of the gateway process are printed: a count that does not move with the machine's load, where the CPU time
read from /proc moves by several microseconds between runs. The part spent re-reading the config file
(`ConfigStore::reload_locked`: the config watcher reads and hashes the file now and then while the calls run) is
printed apart and left out of the figure, since it depends on the run's length, not on the calls. Needs `valgrind`.

Needs `redis-server` on PATH (Debian's `redis-server` package) for the Redis variants. The mock upstream is
`mcpgw-mock-upstream` next to the binary (or `MCPGW_MOCK_UPSTREAM`).
"""

import argparse
import glob
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_gateway import answer_of, free_port, wait_ready

KEY = "gw_bench-key-0000000000000000000000000000000000000"
HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")
VARIANTS = ["none", "none2", "rules10", "rules1000", "quota", "redis", "quota_redis"]
QUOTA = {"name": "q", "per": "key", "rate": "1000000/second"}


def when(n):
    """Rule `n`'s effect and condition: shape `n % 10`, as in benches/policy.rs."""
    shapes = [
        ("deny", "target.server == 'github_{n}' && target.annotations.destructiveHint"
                 " && !('oncall' in principal.groups)"),
        ("deny", "target.name == 'tool_{n}' && principal.project_id == 'p'"),
        ("deny", "target.kind == 'tool' && target.name.startsWith('delete_{n}_') && !('admin' in principal.roles)"),
        ("deny", "principal.email.endsWith('@contractor{n}.example.com') && target.server == 'billing'"),
        ("deny", "'readonly_{n}' in principal.roles && !target.annotations.readOnlyHint"),
        ("deny", "target.server == 'deploy_{n}' && now > timestamp('2026-01-01T00:00:00Z')"),
        ("allow", "target.name in ['search_{n}', 'list_issues_{n}', 'get_file_{n}'] && principal.auth == 'oauth'"),
        ("deny", "has(request.args.limit_{n}) && request.args.limit_{n} > 100"),
        ("deny", "principal.key_id == 'revoked-{n}' || principal.user_id == 'blocked-{n}'"),
        ("deny", "target.server == 'payments_{n}'"
                 " && (!has(principal.claims.dept) || principal.claims.dept != 'finance')"),
    ]
    effect, text = shapes[n % 10]
    return {"name": "rule-%d" % n, "effect": effect, "when": text.replace("{n}", str(n)),
            "message": "denied by the benchmark"}


def config(variant, mock, redis_port):
    common = {"gw_log_level": "WARNING", "upstream_pool": {"max_processes_per_server": 1}}
    if variant.startswith("rules"):
        common["policies"] = [when(n) for n in range(int(variant[len("rules"):]))]
        common["policy_default"] = "allow"
    if variant in ("quota", "quota_redis"):
        common["quotas"] = [QUOTA]
    if variant in ("redis", "quota_redis"):
        common.update({"gw_mcp_use_external_cache": True, "gw_cache_host": "127.0.0.1", "gw_cache_port": redis_port})
    return {
        "admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop",
        "common_mcp_gateway_config": common,
        "mcp_configs": {"c1": {"mcp_config_name": "bench", "mcp_config": [
            {"server_name": "mock", "config": {"command": mock, "args": []}}]}},
        "projects": {"p1": {"project_name": "bench", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "bench@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}},
    }


class Session:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        _, headers = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        self.headers["Mcp-Session-Id"] = headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        self.conn.request("POST", "/mcp/", json.dumps(body), self.headers)
        response = self.conn.getresponse()
        return response.read(), {k.lower(): v for k, v in response.getheaders()}

    def call(self, text):
        args = {"server_name": "mock", "tool_calls": [{"name": "echo", "args": {"text": text}}]}
        data, _ = self.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "gw_secure_call_tools", "arguments": args}})
        result = answer_of(data)["result"]
        if result.get("isError") or text not in json.dumps(result):
            sys.exit("a call failed (a rule or the quota decided?): %s" % json.dumps(result)[:400])


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start_redis():
    """A throwaway redis-server on a free port, nothing persisted."""
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not on PATH (Debian: apt-get install redis-server); or leave out the Redis "
                 "variants with --variants")
    port = free_port()
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return process, port
        except OSError:
            pass
        if time.time() > deadline:
            process.kill()
            sys.exit("redis-server did not start")
        time.sleep(0.05)


def start_gateway(binary, path, under=(), env=None):
    port, metrics = free_port(), free_port()
    command = [binary, "serve", "--config", path, "--gateway-addr", "127.0.0.1:%d" % port, "--admin-addr",
               "127.0.0.1:0", "--metrics-addr", "127.0.0.1:%d" % metrics, "--shutdown-grace", "1"]
    process = subprocess.Popen(list(under) + command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return process, port, metrics


# The allocator options `mcpgw` would otherwise set by starting itself again (src/main.rs), which valgrind would not
# follow (as in benches/instructions.py).
JEMALLOC = ("narenas:1,tcache_nslots_small_max:16,tcache_nslots_large:2,tcache_gc_incr_bytes:8192,"
            "dirty_decay_ms:0,muzzy_decay_ms:0")


def instructions(binary, path, calls, dumps):
    """The gateway of the config at `path` under callgrind: instructions per call, and the part of them spent
    re-reading the config file. The dumps go to `dumps`, not next to the config (its directory is watched)."""
    out = os.path.join(dumps, "callgrind.out")
    gateway, port, metrics = start_gateway(
        binary, path, under=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + ".%p"],
        env=dict(os.environ, _RJEM_MALLOC_CONF=JEMALLOC))
    try:
        wait_ready(metrics, 120, poll=0.2, what="the gateway under valgrind")
        session = Session(port)
        for i in range(200):
            session.call("warm %d" % i)
        subprocess.run(["callgrind_control", "-z", str(gateway.pid)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        for i in range(calls):
            session.call("hello %d" % i)
        subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        total = reload = 0
        for dump in glob.glob("%s.%d.*" % (out, gateway.pid)):
            with open(dump) as f:
                total += next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump], check=True,
                                       capture_output=True, text=True).stdout
            for line in annotated.splitlines():
                if "ConfigStore::reload_locked " in line:
                    reload += int(line.split()[0].replace(",", ""))
        return (total - reload) / calls, reload / calls
    finally:
        gateway.terminate()
        gateway.wait(60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "target", "release", "mcpgw"))
    parser.add_argument("--calls", type=int, default=20000, help="timed calls per variant")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=500, help="untimed calls per variant first")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    parser.add_argument("--dumps", help="with --instructions: keep callgrind's dumps in this directory (for "
                        "callgrind_annotate), else they go with the run's temporary directory")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or "none" not in variants:
        sys.exit("variants: among %s, `none` (the baseline) included" % ", ".join(VARIANTS))
    variants = ["none"] + [v for v in variants if v != "none"]
    binary = os.path.abspath(args.binary)
    mock = os.path.abspath(os.environ.get("MCPGW_MOCK_UPSTREAM")
                           or os.path.join(os.path.dirname(binary), "mcpgw-mock-upstream"))
    per_round = max(1, args.calls // args.rounds)
    redis, redis_port = (None, 0)
    gateways = {}
    with tempfile.TemporaryDirectory() as directory:
        try:
            if any("redis" in v for v in variants):
                redis, redis_port = start_redis()
            paths = {}
            for variant in variants:
                os.mkdir(os.path.join(directory, variant))
                paths[variant] = os.path.join(directory, variant, "gw.json")
                with open(paths[variant], "w") as f:
                    json.dump(config(variant, mock, redis_port), f)
            if args.instructions:
                calls = args.calls if args.calls != parser.get_default("calls") else 1000
                dumps = args.dumps or os.path.join(directory, "dumps")
                os.makedirs(dumps, exist_ok=True)
                counted = {}
                print("%d calls per variant under callgrind, gw_secure_call_tools echo:" % calls)
                print("%-12s %20s %10s %22s" % ("variant", "instructions/call", "vs none", "config re-reads/call"))
                for variant in variants:
                    counted[variant], reload = instructions(binary, paths[variant], calls, dumps)
                    print("%-12s %20.0f %+9.1f%% %22.0f" % (variant, counted[variant],
                                                           (counted[variant] / counted["none"] - 1) * 100, reload),
                          flush=True)
                if "rules10" in counted:
                    added = counted["rules10"] - counted["none"]
                    print("rules10 over none: %+.0f instructions a call, %.1f us at the 6,000 instructions per us "
                          "that `cargo bench --bench policy` runs at (goal: 10 rules under 5 us a call: %s)" %
                          (added, added / 6000, "met" if added < 30000 else "NOT met"))
                return
            for variant in variants:
                gateways[variant] = start_gateway(binary, paths[variant])
            sessions = {}
            for variant, (_, port, metrics) in gateways.items():
                wait_ready(metrics, 60, what="the gateway of " + variant)
                sessions[variant] = Session(port)
                for i in range(args.warmup):
                    sessions[variant].call("warm %d" % i)
            print("load average before: %.2f %.2f %.2f (2 cores)" % os.getloadavg())
            times = {v: [] for v in variants}
            cpu = {v: 0.0 for v in variants}
            redis_cpu = {v: 0.0 for v in variants}
            for r in range(args.rounds):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for variant in order:
                    gateway = gateways[variant][0]
                    session = sessions[variant]
                    before, redis_before = cpu_seconds(gateway.pid), redis and cpu_seconds(redis.pid)
                    for i in range(per_round):
                        started = time.perf_counter()
                        session.call("hello %d" % i)
                        times[variant].append(time.perf_counter() - started)
                    cpu[variant] += cpu_seconds(gateway.pid) - before
                    if redis:
                        redis_cpu[variant] += cpu_seconds(redis.pid) - redis_before
            print("load average after:  %.2f %.2f %.2f" % os.getloadavg())
            calls = per_round * args.rounds
            print("%d calls per variant (c=1, keep-alive, %d rounds), gw_secure_call_tools echo:" %
                  (calls, args.rounds))
            print("%-12s %9s %9s %9s %16s %10s %16s" % ("variant", "p50 ms", "p99 ms", "p50/none", "gateway CPU/call",
                                                       "vs none", "redis CPU/call"))
            base_p50 = statistics.median(times["none"])
            base_cpu = cpu["none"] / calls * 1e6
            for variant in variants:
                ordered = sorted(times[variant])
                p50, p99 = statistics.median(ordered), ordered[int(len(ordered) * 0.99)]
                per_call = cpu[variant] / calls * 1e6
                redis_part = "%13.1f us" % (redis_cpu[variant] / calls * 1e6) if "redis" in variant else ""
                print("%-12s %9.3f %9.3f %8.2fx %13.1f us %+7.1f us %16s" % (
                    variant, p50 * 1e3, p99 * 1e3, p50 / base_p50, per_call, per_call - base_cpu, redis_part))
            if "rules10" in variants:
                added = cpu["rules10"] / calls * 1e6 - base_cpu
                noise = "; the A/A difference (none2) is %+.1f us" % (cpu["none2"] / calls * 1e6 - base_cpu) \
                    if "none2" in variants else ""
                print("rules10 over none: %+.1f us of gateway CPU per call%s. A difference under the A/A one is "
                      "noise: the goal (10 rules under 5 us a call) is judged by --instructions" % (added, noise))
        finally:
            for process, _, _ in gateways.values():
                process.terminate()
            for process, _, _ in gateways.values():
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
            if redis:
                redis.terminate()
                redis.wait(10)


if __name__ == "__main__":
    main()
