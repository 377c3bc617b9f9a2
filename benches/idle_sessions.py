"""Opens N MCP sessions (2025-06-18: initialize + notifications/initialized) over one keep-alive connection to a
running gateway and reads its RSS from /proc before, after opening and after WAIT seconds idle, then sends a
tools/list in the first session (issue 36: what an idle session costs; `cargo bench --bench scale` measures the same
with `MCPGW_SCALE_ONLY=sessions`, this is the quick form against a gateway already running).

    python3 benches/idle_sessions.py PORT KEY N GATEWAY_PID WAIT_SECONDS [--get-stream] [--metrics PORT]

`--get-stream`: each session also holds its GET stream open, on a connection of its own, as the official SDKs do
(the stream's head and first event are read, nothing after: a client that does not read). `--metrics PORT`: the
gateway's metrics listener, to print how many sessions are dormant and how many streams are open after the wait.

The gateway needs `limits.max_sessions` and `limits.max_sessions_per_key` of at least N, and with `--get-stream`
`limits.max_connections` above N (at most half its descriptor limit: `prlimit --nofile=65536` on its command line),
and this process N descriptors more than it has (raised to its hard limit here).
"""
import http.client, json, sys, time, os, socket, resource, urllib.request

args = [a for a in sys.argv[1:] if not a.startswith("--")]
port, key, n, pid, wait = int(args[0]), args[1], int(args[2]), int(args[3]), float(args[4])
get_stream = "--get-stream" in sys.argv
metrics_port = int(sys.argv[sys.argv.index("--metrics") + 1]) if "--metrics" in sys.argv else None
if get_stream:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"): return int(line.split()[1])


def metric(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "): return float(line.split()[1])


conn = http.client.HTTPConnection("127.0.0.1", port)
H = {"authorization": f"Bearer {key}", "content-type": "application/json", "accept": "application/json, text/event-stream"}
def post(body, extra={}):
    conn.request("POST", "/mcp/", json.dumps(body), {**H, **extra})
    r = conn.getresponse(); data = r.read(); return r, data


def open_stream(sid):
    """The session's GET stream on a connection of its own: its head and first event read, then left unread."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"GET /mcp/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
               f"Accept: text/event-stream\r\nMcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n").encode())
    head = b""
    while b"retry:" not in head:
        chunk = s.recv(4096)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return s


base = rss()
sessions, streams = [], []
t0 = time.time()
for i in range(n):
    r, d = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    sid = r.getheader("mcp-session-id")
    assert r.status == 200 and sid, (r.status, d[:200])
    r, d = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"})
    sessions.append(sid)
    if get_stream:
        streams.append(open_stream(sid))
opened = rss()
what = "sessions with their GET stream" if get_stream else "sessions"
print(f"opened {n} {what} in {time.time()-t0:.1f}s: rss {base} -> {opened} KiB: {(opened-base)/n:.1f} KiB/session", flush=True)
time.sleep(wait)
slept = rss()
print(f"after {wait}s idle: rss {slept} KiB: {(slept-base)/n:.1f} KiB/session", flush=True)
if metrics_port:
    print(f"dormant {metric('mcpgw_sessions_dormant'):.0f}, GET streams open {metric('mcpgw_session_streams'):.0f}", flush=True)
r, d = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"mcp-session-id": sessions[0], "mcp-protocol-version": "2025-06-18"})
print("tools/list after idle:", r.status, len(d))
if get_stream:
    streams[0].setblocking(False)
    try:
        alive = streams[0].recv(65536) != b""
    except BlockingIOError:
        alive = True
    print("the first session's stream still open:", alive)
