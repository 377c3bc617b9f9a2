"""What the Python benches share: a free port, waiting for a started `mcpgw serve` to be ready, and the JSON-RPC
answer in a gateway's reply (one JSON body, or the first SSE event that is one). Imported from the benches' own
folder (`python3 benches/NAME.py` puts it on the path)."""

import http.client
import json
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(metrics_port, timeout, poll=0.1, what="the gateway"):
    """Waits until `/readyz` on the metrics listener answers 200; exits the bench after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=5)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit("%s did not become ready" % what)
        time.sleep(poll)


def answer_of(data):
    """The JSON-RPC answer of a JSON body, or of the first SSE event that is one."""
    text = data.decode()
    for line in [text] + [l[5:] for l in text.splitlines() if l.startswith("data:")]:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "result" in message or "error" in message:
            return message
    sys.exit("no answer in %r" % text[:300])
