"""The canary gate's own requests: the smoke prompt, straight to one instance, at a bounded rate.

A quiet service gives the gate too few requests to judge either side; rather than read silence as a
pass, the watcher turns this on for a side while its window holds fewer requests than the checks need,
and off once it has enough (`slo.target_requests`). Each request streams `synthetic_max_tokens` tokens
with `ignore_eos` (so every one also times inter-token latency). Outcomes are counted here (the access
log never sees them: they bypass nginx); latency is read from the instance's own histograms like all
other requests'. At most `rps` starts per second and 4 requests in flight per instance, so a slow
instance is never buried under the gate's own load.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from ernie_ops.config import Config
from ernie_ops.serving import probe
from ernie_ops.traffic.accesslog import Outcomes

MAX_IN_FLIGHT = 4


class SyntheticLoad:
    def __init__(self, cfg: Config, ports: list[int], rps: float | None = None):
        self.cfg = cfg
        self.rps = cfg.cutover.synthetic_rps if rps is None else rps
        self._on: dict[int, bool] = {p: False for p in ports}
        self._in_flight: dict[int, int] = {p: 0 for p in ports}
        self._out = Outcomes()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT * len(ports), thread_name_prefix="synthetic")
        self._client = httpx.Client(timeout=httpx.Timeout(cfg.health.smoke_timeout_seconds, connect=2.0))
        self._thread = threading.Thread(target=self._run, name="synthetic-pacer", daemon=True)
        if self.rps > 0:
            self._thread.start()

    def set(self, port: int, on: bool) -> None:
        self._on[port] = on

    def take(self) -> Outcomes:
        with self._lock:
            out, self._out = self._out, Outcomes()
        return out

    def quiet(self) -> None:
        """No new requests from now on (those in flight finish): before a drain, which must reach zero."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def close(self) -> None:
        self.quiet()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def _run(self) -> None:
        period = 1.0 / self.rps
        next_at = time.monotonic()
        while not self._stop.is_set():
            for port, on in list(self._on.items()):
                with self._lock:
                    room = self._in_flight[port] < MAX_IN_FLIGHT
                    if on and room:
                        self._in_flight[port] += 1
                if on and room:
                    self._pool.submit(self._one, port)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, port: int) -> None:
        body = {
            "model": self.cfg.model.served_name,
            "prompt": self.cfg.health.smoke_prompt,
            "max_tokens": self.cfg.cutover.synthetic_max_tokens,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
        }
        ok = False
        try:
            with self._client.stream("POST", f"{probe.base_url(port)}/v1/completions", json=body) as r:
                if r.status_code == 200:
                    ok = any(line.strip() == "data: [DONE]" for line in r.iter_lines())
        except httpx.HTTPError:
            ok = False
        finally:
            with self._lock:
                self._in_flight[port] -= 1
                self._out.requests[port] += 1
                if not ok:
                    self._out.failed[port] += 1
