"""Opens N MCP sessions (2025-06-18: initialize + notifications/initialized) over one keep-alive connection to a
running gateway and reads its RSS from /proc before, after opening and after WAIT seconds idle, then sends a
tools/list in the first session (issue 36: what an idle session costs; `cargo bench --bench scale` measures the same
with `MCPGW_SCALE_ONLY=sessions`, this is the quick form against a gateway already running).

    python3 benches/idle_sessions.py PORT KEY N GATEWAY_PID WAIT_SECONDS

The gateway needs `limits.max_sessions` and `limits.max_sessions_per_key` of at least N.
"""
import http.client, json, sys, time, os
port, key, n, pid, wait = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"): return int(line.split()[1])
conn = http.client.HTTPConnection("127.0.0.1", port)
H = {"authorization": f"Bearer {key}", "content-type": "application/json", "accept": "application/json, text/event-stream"}
def post(body, extra={}):
    conn.request("POST", "/mcp/", json.dumps(body), {**H, **extra})
    r = conn.getresponse(); data = r.read(); return r, data
base = rss()
sessions = []
t0 = time.time()
for i in range(n):
    r, d = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    sid = r.getheader("mcp-session-id")
    assert r.status == 200 and sid, (r.status, d[:200])
    r, d = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"})
    sessions.append(sid)
opened = rss()
print(f"opened {n} in {time.time()-t0:.1f}s: rss {base} -> {opened} KiB: {(opened-base)/n:.1f} KiB/session", flush=True)
time.sleep(wait)
slept = rss()
print(f"after {wait}s idle: rss {slept} KiB: {(slept-base)/n:.1f} KiB/session", flush=True)
r, d = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"mcp-session-id": sessions[0], "mcp-protocol-version": "2025-06-18"})
print("tools/list after idle:", r.status, len(d))
