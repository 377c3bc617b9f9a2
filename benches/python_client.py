"""The gateway's CPU per call as a Python agent pays it (issue 36): a keep-alive httpx client (httpx2, what the
official Python SDK uses) in 2025-06-18 sessions, calling at a moderate rate, against a Python upstream (the official
SDK's `MCPServer`, FastMCP as was) and against the Rust mock upstream, with the production defaults (INFO logs, spans
exported to stdout).

    python3 benches/python_client.py [--gateway target/release/mcpgw[,OTHER,...]] [--seconds 8] [--rate 400]
                                     [--clients 4] [--rounds 2] [--variants secure/py,...] [--profile-seconds N]
                                     [--floor]

Needs the release build (`cargo build --release --bins`) and the official Python SDK's venv that `.ci/test` installs
(`target/py-peers`; this script runs itself again under that venv's python). One gateway serves two servers: `py`,
the SDK's server over stdio (tool `echo`), and `mock`, `mcpgw-mock-upstream`. Variants, measured in turn in the same
run and repeated `--rounds` times (the figure is the median):

- `secure/py`: `gw_secure_call_tools` with one `echo` on `py`, at `--rate` calls a second over `--clients` sessions;
- `transparent/py`: the transparent `tools/call` of `py__echo`, same rate;
- `secure/mock`: `gw_secure_call_tools` with one `echo` on the mock, same rate;
- `secure/mock saturated`: the same, as fast as the clients go (16 of them).

For each: calls answered, p50, and the gateway's CPU per call read from `/proc/PID/stat` over the window (user +
system, all threads; the clock tick is 10 ms, so a window holds thousands of calls). `--profile-seconds N` holds the
`secure/py` load for N seconds after printing the gateway's pid, for `perf record -p PID` or `strace -c -f -p PID`.

`--gateway A,B` compares builds in the same run: each gets its own gateway (and upstreams), all started at once, and
every variant of every round is measured on each in turn (the order alternating from round to round), so that the
machine's other load falls on both alike. `--variants` measures only those named.

`--floor` adds the floor of this path to the comparison: `benches/floor` (built here into `target/floor`), the least a
Rust MCP gateway does for these calls (hyper on one tokio worker, the request's JSON parsed, one line to the SDK's
server over its stdin, its answer parsed and written back; no logs, spans, checks or sessions kept). It serves the
`py` variants only. Its CPU per call is what this machine charges any gateway for the wake-ups, system calls and
parsing of the path: the gateway's figure is read against it.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_PYTHON = os.path.join(ROOT, "target", "py-peers", "bin", "python")

VENV = os.path.join(ROOT, "target", "py-peers")

if os.path.realpath(sys.prefix) != os.path.realpath(VENV) and not os.environ.get("MCPGW_BENCH_REEXEC"):
    if not os.path.exists(VENV_PYTHON):
        sys.exit("the official Python SDK's venv is missing: run `MCPGW_TEST_INSTALL_ONLY=1 .ci/test` first")
    os.environ["MCPGW_BENCH_REEXEC"] = "1"
    os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)

sys.path.insert(0, HERE)
import httpx2  # noqa: E402
from bench_gateway import answer_of, free_port, wait_ready  # noqa: E402

UPSTREAM = '''
from mcp.server.mcpserver import MCPServer
server = MCPServer("py-echo")

@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return text

server.run()
'''

VERSION = "2025-06-18"


def arg(name, default):
    if name in sys.argv:
        return type(default)(sys.argv[sys.argv.index(name) + 1])
    return default


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_gateway(binary, workdir):
    port, admin, metrics = free_port(), free_port(), free_port()
    home = os.path.join(workdir, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home)
    out = subprocess.run([binary, "init"], env=env, capture_output=True, text=True, check=True).stdout
    key = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("Gateway API key"))
    path = os.path.join(home, ".gw", "gw_mcp_config.json")
    with open(path) as f:
        config = json.load(f)
    upstream = os.path.join(workdir, "py_echo.py")
    with open(upstream, "w") as f:
        f.write(UPSTREAM)
    mock = os.path.join(os.path.dirname(binary), "mcpgw-mock-upstream")
    common = config["common_mcp_gateway_config"]
    common["gw_log_level"] = "INFO"
    common["tool_exposure"] = "both"
    common["limits"] = dict(common.get("limits", {}), max_inflight_per_key=1000, max_sessions_per_key=1000)
    servers = [
        {"server_name": "py", "description": "The official Python SDK's server", "config":
         {"command": VENV_PYTHON, "args": [upstream]}},
        {"server_name": "mock", "description": "The Rust mock upstream", "config": {"command": mock, "args": []}},
    ]
    config.setdefault("plugins", {})["telemetry"] = {"provider": "stdout", "config": {"enabled": True}}
    for cfg in config["mcp_configs"].values():
        cfg["mcp_config"] = servers
    with open(path, "w") as f:
        json.dump(config, f)
    log = open(os.path.join(workdir, "gateway.log"), "w")
    proc = subprocess.Popen(
        [binary, "serve", "--config", path, "--gateway-addr", "127.0.0.1:%d" % port, "--admin-addr",
         "127.0.0.1:%d" % admin, "--metrics-addr", "127.0.0.1:%d" % metrics],
        env=env, stdout=log, stderr=log)
    try:
        wait_ready(metrics, 30)
    except SystemExit:
        log.flush()
        with open(os.path.join(workdir, "gateway.log")) as f:
            sys.exit("the gateway did not become ready:\n" + f.read()[-2000:])
    return proc, "http://127.0.0.1:%d/mcp/" % port, key


class Agent:
    """One client: a keep-alive httpx client in one MCP session."""

    def __init__(self, url, key):
        self.url = url
        self.client = httpx2.Client(timeout=30)
        self.headers = {"authorization": "Bearer " + key, "accept": "application/json, text/event-stream",
                        "content-type": "application/json"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": VERSION, "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}}}
        r = self.client.post(url, json=init, headers=self.headers)
        r.raise_for_status()
        self.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = VERSION
        self.client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.next_id = 1

    def call(self, variant):
        self.next_id += 1
        if variant.startswith("transparent"):
            params = {"name": "py__echo", "arguments": {"text": "hello"}}
        else:
            server = "py" if variant.endswith("/py") else "mock"
            params = {"name": "gw_secure_call_tools",
                      "arguments": {"server_name": server, "tool_calls": [{"name": "echo", "args": {"text": "hello"}}]}}
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params}
        r = self.client.post(self.url, json=body, headers=self.headers)
        message = answer_of(r.content)
        if r.status_code != 200 or "error" in message or "hello" not in json.dumps(message):
            raise RuntimeError("%s: %s %s" % (variant, r.status_code, r.text[:300]))


def run(agents, variant, seconds, rate, pid):
    """Drives `agents` for `seconds`, each at rate/len(agents) calls a second (0: as fast as it goes)."""
    latencies, errors = [], []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def drive(agent):
        gap = len(agents) / rate if rate else 0.0
        due = time.monotonic()
        mine = []
        while time.monotonic() < stop:
            if gap:
                due += gap
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            started = time.perf_counter()
            try:
                agent.call(variant)
            except Exception as e:  # noqa: BLE001: counted and shown
                with lock:
                    errors.append(str(e))
                continue
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    for agent in agents:
        agent.call(variant)
    before = cpu_seconds(pid)
    threads = [threading.Thread(target=drive, args=(agent,)) for agent in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    used = cpu_seconds(pid) - before
    if errors:
        print("  %s: %d errors, first: %s" % (variant, len(errors), errors[0]))
    calls = len(latencies)
    return {"calls": calls, "p50_ms": statistics.median(latencies) * 1e3 if calls else 0.0,
            "cpu_us": used / calls * 1e6 if calls else 0.0, "rate": calls / seconds}


VARIANTS = ["secure/py", "transparent/py", "secure/mock", "secure/mock saturated"]


FLOOR_VARIANTS = ["secure/py", "transparent/py"]


def build_floor():
    """Builds `benches/floor` (release) into `target/floor`; its binary."""
    target = os.path.join(ROOT, "target", "floor")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path",
                    os.path.join(HERE, "floor", "Cargo.toml"), "--target-dir", target], check=True)
    return os.path.join(target, "release", "mcpgw-floor")


def serves(binary, variant):
    """Whether `binary` serves `variant` (the floor serves the `py` ones only)."""
    return not binary.endswith("mcpgw-floor") or variant in FLOOR_VARIANTS


def main():
    binaries = [os.path.abspath(b) for b in arg("--gateway", os.path.join(ROOT, "target", "release", "mcpgw")).split(",")]
    seconds, rate, clients = arg("--seconds", 8.0), arg("--rate", 400.0), arg("--clients", 4)
    rounds, profile = arg("--rounds", 2), arg("--profile-seconds", 0.0)
    wanted = arg("--variants", ",".join(VARIANTS)).split(",")
    if "--floor" in sys.argv:
        binaries.append(build_floor())
    unknown = [v for v in wanted if v not in VARIANTS]
    if unknown:
        sys.exit("unknown variants %s (known: %s)" % (unknown, ", ".join(VARIANTS)))
    with tempfile.TemporaryDirectory() as workdir:
        gateways = []
        try:
            for n, binary in enumerate(binaries):
                home = os.path.join(workdir, str(n))
                os.makedirs(home)
                proc, url, key = start_gateway(binary, home)
                paced = [Agent(url, key) for _ in range(clients)]
                saturating = paced + [Agent(url, key) for _ in range(16 - clients)]
                gateways.append((binary, proc, {"secure/py": (paced, rate), "transparent/py": (paced, rate),
                                                "secure/mock": (paced, rate),
                                                "secure/mock saturated": (saturating, 0.0)}))
            if profile:
                binary, proc, drives = gateways[0]
                print("gateway pid %d: secure/py at %d calls/s for %.0f s" % (proc.pid, rate, profile), flush=True)
                r = run(drives["secure/py"][0], "secure/py", profile, rate, proc.pid)
                print("  %d calls, gateway CPU %.1f us per call" % (r["calls"], r["cpu_us"]))
                return
            results = {(binary, name): [] for binary, _, _ in gateways for name in wanted}
            for round_ in range(rounds):
                for name in wanted:
                    order = gateways if round_ % 2 == 0 else list(reversed(gateways))
                    for binary, proc, drives in order:
                        if not serves(binary, name):
                            continue
                        agents, r = drives[name]
                        results[(binary, name)].append(run(agents, name, seconds, r, proc.pid))
        finally:
            # Not SIGTERM: the drain would wait for the clients' open sessions.
            for _, proc, _ in gateways:
                proc.kill()
                proc.wait(10)
    print("2 cores shared by the Python clients, the gateway and its upstreams; %s per variant, %d rounds, medians"
          % ("%.0f s" % seconds, rounds))
    print("| variant | %scalls/s | p50 | gateway CPU per call | rounds' CPU per call |"
          % ("build | " if len(binaries) > 1 else ""))
    print("|---|---|---|---|---|%s" % ("---|" if len(binaries) > 1 else ""))
    for name in wanted:
        for binary in binaries:
            runs = results[(binary, name)]
            if not runs:
                continue
            med = lambda field: statistics.median(r[field] for r in runs)  # noqa: E731
            build = "%s | " % binary if len(binaries) > 1 else ""
            print("| %s | %s%.0f | %.3f ms | %.1f us | %s |" % (name, build, med("rate"), med("p50_ms"), med("cpu_us"),
                                                              ", ".join("%.0f" % r["cpu_us"] for r in runs)))


if __name__ == "__main__":
    main()
