#!/usr/bin/env python3
"""A STUB standing in for `vllm serve`, used only to inject faults real vLLM cannot produce on demand.

Invoked as `vllm serve MODEL --port P --served-model-name NAME ...` (the launcher's GPU command
line). STUB_MODE selects the fault:
  wrong-model        /v1/models lists another model
  completion-500     completions fail with HTTP 500
  ignore-term        ignores SIGTERM and never opens its port (a loading engine, measured > 90 s)
  exit0-after-ready  serves, then exits 0 one second after its first completion (EngineDeadError case)
  close-then-exit    serves, one second after its first completion closes its port, exits 1 0.3 s later
                     (a killed engine: its socket is gone a moment before its exit can be reaped)
  fail-after-ready   the first completion (the launcher's READY gate) works, later ones get HTTP 500
  slow-after-ready   the first completion works, later ones hang for 60 s (a smoke-test time-out)
  deaf-serving       serves normally but ignores SIGTERM (a drain that never ends)
  slow-health        after its first completion, /health answers only after STUB_HEALTH_DELAY s (default 4): a busy
                     engine's API server on a starved CPU (fresh clone: 5 s+ for 15 s, killed by the watchdog)
  ok                 serves normally
Every mode maps a /dev/shm/psm_stub_<pid> segment, like vLLM's shared memory.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def arg(name: str, default: str = "") -> str:
    argv = sys.argv
    return argv[argv.index(name) + 1] if name in argv else default


MODE = os.environ.get("STUB_MODE", "ok")
PORT = int(arg("--port"))
NAME = arg("--served-model-name", "stub")

shm_path = f"/dev/shm/psm_stub_{os.getpid()}"
with open(shm_path, "wb") as f:
    f.write(b"\0" * 4096)
shm_file = open(shm_path, "r+b")  # noqa: SIM115 - held for the life of the process, like vLLM's segments
shm_map = mmap.mmap(shm_file.fileno(), 4096)
completions = 0


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            if MODE == "slow-health" and completions >= 1:
                time.sleep(float(os.environ.get("STUB_HEALTH_DELAY", "4")))
            self._json(200, {})
        elif self.path == "/v1/models":
            model = "some-other-model" if MODE == "wrong-model" else NAME
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        global completions
        completions += 1
        if MODE == "slow-after-ready" and completions > 1:
            time.sleep(60)
        if MODE == "completion-500" or (MODE == "fail-after-ready" and completions > 1):
            self._json(500, {"error": {"message": "EngineCore encountered an issue"}})
            return
        self._json(200, {"choices": [{"index": 0, "text": "hi", "finish_reason": "length"}]})
        if MODE == "exit0-after-ready":
            threading.Timer(1.0, lambda: os._exit(0)).start()
        if MODE == "close-then-exit":
            threading.Timer(1.0, server.shutdown).start()


if MODE == "deaf-serving":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

if MODE == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)

server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.serve_forever()
server.server_close()  # only after shutdown(): close-then-exit
time.sleep(0.3)
os._exit(1)
