"""serve_util.py: what the server tests share: check() with its failure list, a free port, a raw
HTTP request, and waiting for a started server's /health.

Used by serve_test.py and serve_offload_test.py (Python puts the script's folder on sys.path, so a
plain `import serve_util` finds this file beside them).
"""
import http.client
import socket
import time

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return cond


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw(port, method, path, body=None, headers=None, timeout=60):
    """One request; body is bytes or str as sent. Returns (status, response bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def wait_healthy(p, port, tries):
    """Polls /health every 0.1 s until it answers 200; raises if the server exits or never answers."""
    for _ in range(tries):
        if p.poll() is not None:
            raise RuntimeError("the server exited: " + p.stderr.read())
        try:
            if raw(port, "GET", "/health")[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("the server did not start")
