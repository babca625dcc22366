"""What reading the session key with njs costs nginx (issue 33: OpenAI's `user` field is in the JSON body).

The shipped gateway site (tests/harness/nginx.py) in front of a stub that answers each request at once (a minimal
ASGI app under uvicorn, kept-alive as vLLM is): nginx's own CPU time (master and workers, from /proc) per request, side by
side in one run:
- `/tokenize`: proxied as before, no njs (the baseline), with a small and with a 64 KB body;
- `/v1/` without a key, with `X-Session-Id`, with `user` in a small body, with `user` in a 64 KB body (a long chat).
Each variant runs N requests one after another from one client (no keep-alive to the gateway, as shipped).

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.session_key_cost [N]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from tests.conftest import free_port
from tests.harness import nginx

STUB = """
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def cpu_seconds(pid: int) -> float:
    """nginx's master and workers, user + system."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children()]
    return sum(p.cpu_times().user + p.cpu_times().system for p in procs)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    history = [{"role": "user", "content": "word " * 160}] * 80  # ~64 KB of JSON
    variants = [
        ("/tokenize, no njs (baseline)", "/tokenize", {}, {"model": "m", "prompt": "Hi"}),
        ("/v1/ without a key", "/v1/completions", {}, {"model": "m", "prompt": "Hi"}),
        ("/v1/ with X-Session-Id", "/v1/completions", {"X-Session-Id": "thread-1"}, {"model": "m", "prompt": "Hi"}),
        ("/v1/ with `user`, small body", "/v1/completions", {}, {"model": "m", "prompt": "Hi", "user": "alice"}),
        ("/tokenize, 64 KB body, no njs", "/tokenize", {}, {"model": "m", "messages": history, "user": "alice"}),
        ("/v1/ with `user`, 64 KB body", "/v1/chat/completions", {}, {"model": "m", "messages": history, "user": "alice"}),
    ]
    port = free_port()
    stub = subprocess.Popen([sys.executable, "-c", STUB, str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    with tempfile.TemporaryDirectory(prefix="eo-njs-", dir="/var/tmp") as d:
        Path(d).chmod(0o755)  # nginx's workers (user nobody) write bodies over 16 KB outside /v1/ to temp files under it
        ng = nginx.prepare(Path(d) / "nginx", free_port(), port).start()
        try:
            rows = []
            with httpx.Client(timeout=10) as client:
                for name, path, headers, body in variants:
                    data = json.dumps(body)
                    for _ in range(50):  # warm-up
                        client.post(f"{ng.url}{path}", content=data, headers={**headers, "Content-Type": "application/json"})
                    before = cpu_seconds(ng.proc.pid)
                    for _ in range(n):
                        r = client.post(f"{ng.url}{path}", content=data, headers={**headers, "Content-Type": "application/json"})
                        assert r.status_code == 200, (name, r.status_code, r.text[:200])
                    rows.append((name, len(data), (cpu_seconds(ng.proc.pid) - before) / n * 1e6))
        finally:
            ng.stop()
            stub.terminate()
            stub.wait(timeout=10)
    base = rows[0][2]
    print(f"\nnginx CPU per request, {n} requests each (stub backend)")
    print("| request | body bytes | nginx CPU µs / request | vs baseline |")
    print("|---|---|---|---|")
    for name, size, us in rows:
        print(f"| {name} | {size:,} | {us:.0f} | {us / base:.2f}x |")


if __name__ == "__main__":
    main()
