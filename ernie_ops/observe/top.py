"""`ernie-ops top`: each instance and the gateway over a sliding window, from deltas of vLLM's own counters.

Every `interval` each configured instance's /metrics is scraped (window.parse for the counters and
histograms, metrics.parse for the gauges); a frame compares the newest scrape with the oldest one still
inside `window` seconds, so requests/s, TTFT p50/p99 and the error share say what happened in that window,
never since the process started (a lifetime p99 hides a regression behind hours of good requests). A
restart inside the window (window.Restarted) restarts that instance's window. The gateway's access log
adds the 5xx answers nginx gave per instance (errors vLLM never saw, e.g. a refused connection).

`Sampler` is pure apart from the injected `scrape` and clock, so frames are unit-tested from text.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import httpx

from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError
from ernie_ops.serving import probe
from ernie_ops.stats import metrics
from ernie_ops.traffic import accesslog, gateway
from ernie_ops.traffic.accesslog import Outcomes
from ernie_ops.traffic.canary import window


@dataclass
class InstanceFrame:
    port: int
    up: bool
    share: float | None = None  # % of gateway traffic nginx routes here (None: not routed)
    seconds: float = 0.0  # the window this frame covers for this instance
    requests: int = 0  # finished in the window
    rps: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    itl_p50: float | None = None
    error_share: float | None = None  # failed / requests in the window (vLLM error+abort, gateway 5xx: the larger)
    note: str = ""  # why a number is missing (down, restarted, warming up)


@dataclass
class Frame:
    at: float
    window_seconds: float
    gateway_url: str
    instances: list[InstanceFrame] = field(default_factory=list)
    problem: str | None = None  # e.g. the upstream include cannot be read
    pool: int | None = None  # a pool's size (pool.replicas > 1): the view adds the pool's total

    def total(self) -> InstanceFrame | None:
        """The pool's replicas in rotation added up (req/s, running, waiting); None without a pool."""
        if self.pool is None:
            return None
        serving = [i for i in self.instances if i.up and i.share is not None]
        add = lambda vals: sum(vals) if vals else None  # noqa: E731
        return InstanceFrame(
            port=0, up=bool(serving), share=sum(i.share for i in serving) if serving else None, requests=sum(i.requests for i in serving),
            rps=add([i.rps for i in serving if i.rps is not None]), running=add([i.running for i in serving if i.running is not None]),
            waiting=add([i.waiting for i in serving if i.waiting is not None]),
            note=f"{len(serving)} of {self.pool} replicas in rotation",
        )  # fmt: skip

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Sample:
    at: float
    counters: window.Scrape
    gauges: metrics.Snapshot


Scrape = Callable[[int], str | None]  # /metrics text of an instance, None when it does not answer


class Sampler:
    def __init__(self, cfg: Config, window_seconds: float, scrape: Scrape, clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.window_seconds = window_seconds
        self.scrape = scrape
        self.clock = clock
        self.samples: dict[int, deque[_Sample]] = {i.port: deque() for i in cfg.instances}
        self.outcomes: dict[int, deque[tuple[float, Outcomes]]] = {i.port: deque() for i in cfg.instances}
        self.tail = accesslog.Tail(cfg.gateway.access_log) if cfg.gateway.access_log else None

    def sample(self) -> None:
        now = self.clock()
        out = self.tail.read() if self.tail is not None else Outcomes()
        for port, kept in self.samples.items():
            text = self.scrape(port)
            one = Outcomes()
            one.requests[port], one.failed[port] = out.requests[port], out.failed[port]
            self.outcomes[port].append((now, one))
            if text is None:
                kept.clear()
                continue
            try:
                kept.append(_Sample(now, window.parse(text), metrics.parse(text)))
            except ValueError:
                kept.clear()
                continue
            window.slide(kept, now, self.window_seconds)
            while self.outcomes[port] and now - self.outcomes[port][0][0] > self.window_seconds:
                self.outcomes[port].popleft()

    def frame(self, shares: dict[int, float] | None = None, problem: str | None = None) -> Frame:
        shares = shares or {}
        pool = self.cfg.pool.replicas if self.cfg.pool.replicas > 1 else None
        f = Frame(self.clock(), self.window_seconds, self.cfg.gateway.url, problem=problem, pool=pool)
        for port, kept in self.samples.items():
            inst = InstanceFrame(port=port, up=bool(kept), share=shares.get(port))
            f.instances.append(inst)
            if not kept:
                inst.note = "does not answer /metrics"
                continue
            last = kept[-1]
            inst.running, inst.waiting, inst.kv_cache = last.gauges.running, last.gauges.waiting, last.gauges.kv_cache_usage
            if len(kept) < 2:
                inst.note = "warming up (one scrape)"
                continue
            first = kept[0]
            try:
                d = window.delta(first.counters, last.counters, last.at - first.at)
            except window.Restarted as exc:
                kept.clear()
                kept.append(last)
                inst.note = f"restarted ({exc})"
                continue
            gw_requests = sum(o.requests[port] for t, o in self.outcomes[port] if t > first.at)
            gw_failed = sum(o.failed[port] for t, o in self.outcomes[port] if t > first.at)
            inst.seconds = d.seconds
            inst.requests = int(max(d.requests, gw_requests))
            failed = max(d.failed, gw_failed)
            inst.rps = d.requests / d.seconds if d.seconds > 0 else None
            inst.ttft_p50, inst.ttft_p99 = d.ttft.quantile(0.5), d.ttft.quantile(0.99)
            inst.itl_p50 = d.itl.quantile(0.5)
            inst.error_share = failed / inst.requests if inst.requests else None
        return f


def http_scrape(cfg: Config, client: httpx.Client) -> Scrape:
    def scrape(port: int) -> str | None:
        try:
            return metrics.fetch(client, probe.base_url(port), min(2.0, cfg.health.request_timeout_seconds))
        except httpx.HTTPError:
            return None

    return scrape


def routed_shares(cfg: Config) -> tuple[dict[int, float], str | None]:
    """Port -> % of the gateway's traffic, and a problem reading the include. A pool's replicas in rotation share it
    evenly (least_conn balances by load: an even share is what nginx aims at); one marked down gets none."""
    try:
        gw = gateway.Gateway(cfg.gateway)
        if cfg.pool.replicas > 1:
            return gateway.shares(dict.fromkeys(gateway.in_rotation(gw.read_upstream()), 1)), None
        return gateway.shares(gw.weights()), None
    except ErnieOpsError as exc:
        return {}, str(exc)


def frames(cfg: Config, window_seconds: float, interval: float, client: httpx.Client):
    """Frames forever: one per interval once two scrapes exist."""
    s = Sampler(cfg, window_seconds, http_scrape(cfg, client))
    s.sample()
    while True:
        time.sleep(interval)
        s.sample()
        yield s.frame(*routed_shares(cfg))
