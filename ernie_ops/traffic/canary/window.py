"""One instance's counters from one scrape of vLLM's /metrics, and what happened between two scrapes.

The canary gate never reads vLLM's own averages or its lifetime quantiles: it takes two scrapes of
each instance and subtracts them, so a window holds only the requests served between them (a
lifetime p99 would hide a canary that went bad a minute ago behind an hour of good ones).

A window is void when the instance restarted in it: its process start time changed, or a counter went
backwards (a new process starts from zero). `delta` then raises `Restarted`, and the gate says so
instead of reading a negative count as "fewer errors".
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from ernie_ops.stats.metrics import histogram_quantile

TTFT = "vllm:time_to_first_token_seconds"
# vLLM renamed time_per_output_token to inter_token_latency (0.10); the old name is read when the new is absent
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
FINISHED = "vllm:request_success_total"
FAILED_REASONS = ("error", "abort")  # finished_reason values that count as failed requests
START_TIME = "process_start_time_seconds"


class Restarted(Exception):
    """The instance restarted between the two scrapes: the window says nothing about it."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (le), +Inf included: Prometheus' own representation."""

    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        out = []
        for le, n in self.buckets:
            d = n - before.get(le, 0.0)
            if d < 0:
                raise Restarted(f"bucket le={le:g} went from {before.get(le, 0.0):g} to {n:g}")
            out.append((le, d))
        return Histogram(tuple(out))

    def plus(self, other: Histogram) -> Histogram:
        """Two instances' observations in one histogram (a pool's old replicas as one baseline), on the union of their
        bounds: at a bound one of them lacks, its count is that of its largest bound below (what it surely had)."""
        if not other.buckets:
            return self
        if not self.buckets:
            return other

        def at(h: Histogram, le: float) -> float:
            return max((n for b, n in h.buckets if b <= le), default=0.0)

        bounds = sorted({b for b, _ in self.buckets} | {b for b, _ in other.buckets})
        return Histogram(tuple((le, at(self, le) + at(other, le)) for le in bounds))

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket; None without requests."""
        return histogram_quantile(q, list(self.buckets))

    def bound_at_or_above(self, seconds: float) -> float:
        """The first finite bucket bound >= seconds (seconds itself beyond the last one, or with no buckets)."""
        return min((le for le, _ in self.buckets if seconds <= le < math.inf), default=seconds)

    def above(self, seconds: float) -> tuple[float, float]:
        """(surely, possibly): how many observations are above `seconds`, as far as the buckets tell.

        Surely: those above the first bucket bound >= seconds. Possibly: those above the last bound <= seconds.
        The gate fails a canary only on what is sure and passes it only on what is possible."""
        total = self.count
        lower = max((n for le, n in self.buckets if le <= seconds), default=0.0)
        upper = min((n for le, n in self.buckets if le >= seconds), default=total)
        return total - upper, total - lower


@dataclass(frozen=True)
class Scrape:
    """The counters the gate needs from one /metrics answer (summed over engines)."""

    start_time: float | None
    ttft: Histogram
    itl: Histogram
    finished: dict[str, float] = field(default_factory=dict)  # finished_reason -> requests

    @property
    def failed(self) -> float:
        return sum(self.finished.get(r, 0.0) for r in FAILED_REASONS)

    @property
    def requests(self) -> float:
        return sum(self.finished.values())


@dataclass(frozen=True)
class Delta:
    """What one instance did between two scrapes."""

    ttft: Histogram
    itl: Histogram
    requests: float  # finished, any reason
    failed: float  # finished with error or abort
    seconds: float


def slide(kept: deque, now: float, seconds: float) -> None:
    """Drop the oldest samples (anything with `.at`) while the next one is still at least `seconds` old: the window
    then starts at the newest sample that old, so it covers at least `seconds` once there are enough (the canary
    gate's recent window and `ernie-ops top`)."""
    while len(kept) > 2 and now - kept[1].at >= seconds:
        kept.popleft()


def parse(text: str) -> Scrape:
    ttft: dict[float, float] = {}
    itl: dict[str, dict[float, float]] = {name: {} for name in ITL}
    finished: dict[str, float] = {}
    start = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == f"{TTFT}_bucket":
                le = float(s.labels["le"])
                ttft[le] = ttft.get(le, 0.0) + s.value
            elif s.name.endswith("_bucket") and s.name.removesuffix("_bucket") in ITL:
                le = float(s.labels["le"])
                into = itl[s.name.removesuffix("_bucket")]
                into[le] = into.get(le, 0.0) + s.value
            elif s.name == FINISHED:
                reason = s.labels.get("finished_reason", "")
                finished[reason] = finished.get(reason, 0.0) + s.value
            elif s.name == START_TIME:
                start = s.value if start is None else min(start, s.value)
    chosen = next((itl[name] for name in ITL if itl[name]), {})
    return Scrape(start, _hist(ttft), _hist(chosen), finished)


def _hist(buckets: dict[float, float]) -> Histogram:
    return Histogram(tuple(sorted(buckets.items(), key=lambda kv: kv[0] if not math.isinf(kv[0]) else math.inf)))


def delta(earlier: Scrape, later: Scrape, seconds: float) -> Delta:
    """later - earlier; raises Restarted when the instance restarted in between."""
    if earlier.start_time is not None and later.start_time is not None and later.start_time != earlier.start_time:
        raise Restarted(f"its process start time changed ({earlier.start_time:.0f} -> {later.start_time:.0f})")
    for reason, n in earlier.finished.items():
        if later.finished.get(reason, 0.0) < n:
            raise Restarted(f"request_success_total{{finished_reason={reason!r}}} went from {n:g} to {later.finished.get(reason, 0.0):g}")
    return Delta(
        ttft=later.ttft.minus(earlier.ttft),
        itl=later.itl.minus(earlier.itl),
        requests=later.requests - earlier.requests,
        failed=later.failed - earlier.failed,
        seconds=seconds,
    )
