"""What the canary gate sees: both instances measured every interval, as windows of the same time span.

`RealMeter.tick()` scrapes each instance's /metrics, reads the access log lines written since the last
tick and takes the synthetic requests' outcomes. `Windows` turns ticks into `slo.Side`s: the whole phase
(since a canary step or the bake began) and the recent window (the last `window_seconds`), each from
two scrapes of the same instance subtracted (window.delta) and the outcomes in between.

A side's requests and failures are the larger of what the gateway and the gate's own requests saw and
what vLLM counted (`request_success_total`; error and abort are failures): a 500 from a proxy in front
of an instance never reaches vLLM, and a stream that vLLM aborted may have been logged 200 by nginx.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from ernie_ops.config import Config
from ernie_ops.serving import probe
from ernie_ops.stats import metrics
from ernie_ops.traffic import accesslog
from ernie_ops.traffic.accesslog import Outcomes
from ernie_ops.traffic.canary import slo, window
from ernie_ops.traffic.canary.slo import Side
from ernie_ops.traffic.canary.synthetic import SyntheticLoad


@dataclass
class Tick:
    at: float
    scrapes: dict[int, window.Scrape | str]  # a str says why there is no scrape
    outcomes: Outcomes = field(default_factory=Outcomes)
    problem: str | None = None  # e.g. the access log cannot be read


class Meter(Protocol):
    def tick(self) -> Tick: ...

    def want(self, port: int, on: bool) -> None:
        """Synthetic requests to `port` on or off."""

    def quiet(self) -> None:
        """No more synthetic requests at all (before a drain)."""

    def close(self) -> None: ...


class RealMeter:
    def __init__(self, cfg: Config, ports: list[int]):
        self.ports = ports
        self.timeout = min(2.0, cfg.health.request_timeout_seconds)
        self.client = httpx.Client(timeout=self.timeout)
        self.tail = accesslog.Tail(cfg.gateway.access_log) if cfg.gateway.access_log else None
        self.synthetic = SyntheticLoad(cfg, ports)

    def tick(self) -> Tick:
        scrapes: dict[int, window.Scrape | str] = {}
        for port in self.ports:
            try:
                scrapes[port] = window.parse(metrics.fetch(self.client, probe.base_url(port), self.timeout))
            except httpx.HTTPError as exc:
                scrapes[port] = f"does not answer /metrics ({type(exc).__name__})"
            except ValueError as exc:
                scrapes[port] = f"/metrics is not Prometheus text ({exc})"
        out = Outcomes()
        problem = None
        if self.tail is not None:
            out.add(self.tail.read())
            problem = self.tail.problem
        out.add(self.synthetic.take())
        return Tick(time.monotonic(), scrapes, out, problem)

    def want(self, port: int, on: bool) -> None:
        self.synthetic.set(port, on)

    def quiet(self) -> None:
        self.synthetic.quiet()

    def close(self) -> None:
        self.synthetic.close()
        self.client.close()


class Windows:
    """The ticks of one phase: its first, the recent ones, and the outcomes summed since the first."""

    def __init__(self, first: Tick, window_seconds: float):
        self.first = first
        self.window_seconds = window_seconds
        self.recent: deque[Tick] = deque([first])
        self.total = Outcomes()
        self.last = first

    def add(self, tick: Tick) -> None:
        self.total.add(tick.outcomes)
        self.recent.append(tick)
        self.last = tick
        window.slide(self.recent, tick.at, self.window_seconds)

    @property
    def seconds(self) -> float:
        return self.last.at - self.first.at

    def phase(self, port: int) -> Side:
        return _side(port, self.first, self.last, self.total)

    def recent_side(self, port: int) -> Side:
        out = Outcomes()
        for t in list(self.recent)[1:]:
            out.add(t.outcomes)
        return _side(port, self.recent[0], self.last, out)


def _side(port: int, start: Tick, end: Tick, outcomes: Outcomes) -> Side:
    a, b = start.scrapes.get(port, "was not measured"), end.scrapes.get(port, "was not measured")
    if isinstance(b, str):
        return Side(port, problem=f"{port} {b}")
    if isinstance(a, str):
        return Side(port, problem=f"{port} {a} at the window's start")
    try:
        d = window.delta(a, b, end.at - start.at)
    except window.Restarted as exc:
        return Side(port, problem=f"{port} restarted in the window: {exc}")
    requests = max(outcomes.requests[port], int(d.requests))
    failed = max(outcomes.failed[port], int(d.failed))
    return Side(port, requests=requests, failed=failed, ttft=d.ttft, itl=d.itl)


def feed(meter: Meter, w: Windows, ports: Iterable[int], need: int, v: slo.Verdict) -> None:
    """Synthetic requests to each port that has fewer than `need` requests in this phase's window, and to every one
    while the gate is undecided: one slow or failed request among the first `need` leaves a bound too wide, and on a
    quiet host only more requests narrow it (without them a step waited out step_max_seconds and rolled back)."""
    undecided = v.result == slo.INCONCLUSIVE
    for port in ports:
        side = w.phase(port)
        meter.want(port, side.problem is None and (side.requests < need or undecided))
