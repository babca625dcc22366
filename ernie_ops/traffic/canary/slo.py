"""The canary gate's judgement of one window: canary against the SLOs and against the baseline, from data.

Pure: two `Side`s (what each instance did in the same window) and the SLO config in, a `Verdict` out.

Every check is a question about a share of requests, answered with a bound, never a point estimate:
  errors   "at most max_error_rate of requests fail": k failures in n requests bound the true rate by
           a one-sided exact binomial (Clopper-Pearson) interval at `confidence`; for k = 0 its upper end is
           1 - (1 - c)^(1/n), the rule of three's family (about 3/n at 95%). 0 failures in 20 requests is
           "at most 14%", not "0%". Above EXACT_UP_TO requests Wilson's score interval stands in (there
           the two agree to a fraction of a percent, and the exact one costs O(n) per evaluation).
  latency  "the q-quantile is <= T" is "at most 1-q of requests took longer than T". The histogram buckets
           say how many surely and how many possibly did (`Histogram.above`); the same bounds apply.
           T is the absolute limit (ttft_seconds / itl_seconds) and max_ratio x the baseline's own
           quantile in this window (never below ratio_floor_seconds), taken at the first bucket bound at or
           above it: the buckets cannot tell values inside one apart, and a ratio inside a bucket left every
           canary whose quantile fell in that bucket undecided for good (CI rolled back a healthy canary at p90
           0.145 s against 3x baseline 0.225 s, inside (0.1, 0.25]). A fail needs the sure count, so the bound
           changes passes only. Token gaps of one request are not independent, so no latency verdict before
           the canary has MIN_TIMED timed requests.
A check fails only when its lower bound is above the allowed share (the data shows a breach even at
its most favourable reading), passes only when its upper bound is within it and the canary has served
`min_requests`, and is "inconclusive" in between: too few requests is never a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from ernie_ops.config import SloConfig
from ernie_ops.traffic.canary.window import Histogram

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
EXACT_UP_TO = 1000
MIN_TIMED = 10


def upper_bound(k: float, n: float, confidence: float) -> float:
    """One-sided upper bound of a binomial share (k of n) at `confidence`."""
    k, n = round(k), round(n)
    if n <= 0 or k >= n:
        return 1.0
    if k <= 0:
        return 1.0 - (1.0 - confidence) ** (1.0 / n)
    if n > EXACT_UP_TO:
        return _wilson(k, n, confidence)[1]
    # the p at which k or fewer failures has probability 1 - confidence
    return _solve(lambda p: _cdf(k, n, p) - (1.0 - confidence))


def lower_bound(k: float, n: float, confidence: float) -> float:
    k, n = round(k), round(n)
    if n <= 0 or k <= 0:
        return 0.0
    if k >= n:
        return (1.0 - confidence) ** (1.0 / n)
    if n > EXACT_UP_TO:
        return _wilson(k, n, confidence)[0]
    # the p at which k or more failures has probability 1 - confidence
    return _solve(lambda p: (1.0 - confidence) - (1.0 - _cdf(k - 1, n, p)))


def _cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0 if k < n else 1.0
    lp, lq, ln_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    terms = [ln_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _solve(f) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _wilson(k: float, n: float, confidence: float) -> tuple[float, float]:
    z = NormalDist().inv_cdf(confidence)
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return max(0.0, (centre - spread) / denom), min(1.0, (centre + spread) / denom)


def requests_to_pass(share: float, confidence: float) -> int:
    """The fewest requests that can show "at most `share`" at all: all of them good, the bound at `share`."""
    return math.ceil(math.log(1.0 - confidence) / math.log(1.0 - share))


def target_requests(slo: SloConfig, min_requests: int) -> int:
    """How many requests a side needs in a window before every check can pass (what synthetic load fills)."""
    return max(
        min_requests,
        requests_to_pass(slo.max_error_rate, slo.confidence),
        requests_to_pass(1.0 - slo.ttft_quantile, slo.confidence),
        requests_to_pass(1.0 - slo.itl_quantile, slo.confidence),  # per token, so requests are an upper bound
    )


@dataclass
class Side:
    """What one instance did in the window."""

    port: int
    requests: int = 0  # outcomes seen: API requests through the gateway plus the tool's own synthetic ones
    failed: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)
    problem: str | None = None  # it did not answer /metrics, or restarted: the window says nothing else about it
    also: tuple[int, ...] = ()  # a pooled side's other ports (`pooled`)

    @property
    def label(self) -> str:
        return "+".join(str(p) for p in (self.port, *self.also))

    def summary(self) -> str:
        if self.problem:
            return f"{self.label}: {self.problem}"
        q = self.ttft.quantile(0.99)
        i = self.itl.quantile(0.99)
        return f"{self.label}: {self.requests} req, {self.failed} failed, ttft p99 {_s(q)}, itl p99 {_s(i)} ({self.ttft.count:.0f} timed)"


def pooled(sides: list[Side]) -> Side:
    """Several instances judged as one side (a pool's replicas still on the old version, the baseline of a new one):
    their requests, failures and latencies summed. A side that cannot be measured is left out and named only when
    none can (then the baseline says nothing, as one instance's would)."""
    if not sides:
        raise ValueError("no side to pool")
    ports = tuple(s.port for s in sides)
    good = [s for s in sides if s.problem is None]
    if not good:
        return Side(ports[0], problem="; ".join(str(s.problem) for s in sides), also=ports[1:])
    out = Side(ports[0], also=ports[1:])
    for s in good:
        out.requests += s.requests
        out.failed += s.failed
        out.ttft, out.itl = out.ttft.plus(s.ttft), out.itl.plus(s.itl)
    return out


@dataclass
class Check:
    name: str
    result: str
    detail: str


@dataclass
class Verdict:
    result: str
    checks: list[Check]
    canary: Side
    baseline: Side | None

    @property
    def reason(self) -> str:
        """The checks that decided: the failed ones, else the undecided ones, else all."""
        pick = [c for c in self.checks if c.result == self.result] or self.checks
        return "; ".join(f"{c.name}: {c.detail}" for c in pick)

    def as_dict(self) -> dict:
        return {
            "result": self.result,
            "checks": [vars(c) for c in self.checks],
            "canary": self.canary.summary(),
            "baseline": self.baseline.summary() if self.baseline else None,
        }


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}s"


def _pct(v: float) -> str:
    return f"{v:.1%}" if v < 0.995 else "100%"


def judge(canary: Side, baseline: Side | None, slo: SloConfig, min_requests: int, compare_latency: bool = True) -> Verdict:
    """`compare_latency` False: latency against the absolute limits only (in the bake window the baseline gets
    only the gate's own requests, so its latency is that of an idle instance, no fair yardstick)."""
    if canary.problem:
        checks = [Check("canary", FAIL, canary.problem)]
        return Verdict(FAIL, checks, canary, baseline)
    checks = [_errors(canary, baseline, slo, min_requests)]
    base_ok = baseline is not None and not baseline.problem
    for name, q, limit, attr in (("ttft", slo.ttft_quantile, slo.ttft_seconds, "ttft"), ("itl", slo.itl_quantile, slo.itl_seconds, "itl")):
        base_hist = getattr(baseline, attr) if base_ok and compare_latency else None
        checks.append(_latency(name, q, limit, getattr(canary, attr), base_hist, slo, min_requests, canary.ttft.count))
    if baseline is not None and baseline.problem:
        checks.append(Check("baseline", INCONCLUSIVE, baseline.problem))
    results = {c.result for c in checks}
    result = FAIL if FAIL in results else INCONCLUSIVE if INCONCLUSIVE in results else PASS
    return Verdict(result, checks, canary, baseline)


def _errors(canary: Side, baseline: Side | None, slo: SloConfig, min_requests: int) -> Check:
    n, k, c = canary.requests, canary.failed, slo.confidence
    if n == 0:
        return Check("errors", INCONCLUSIVE, "no requests yet")
    lo, hi = lower_bound(k, n, c), upper_bound(k, n, c)
    said = f"{k} of {n} failed (true rate {_pct(lo)}-{_pct(hi)} at {c:.0%})"
    if lo > slo.max_error_rate:
        return Check("errors", FAIL, f"{said}, above max_error_rate {_pct(slo.max_error_rate)}")
    if baseline is not None and not baseline.problem and baseline.requests > 0 and k > 0:
        b_hi = upper_bound(baseline.failed, baseline.requests, c)
        if lo > b_hi:
            return Check(
                "errors",
                FAIL,
                f"{said}, worse than baseline {baseline.label} ({baseline.failed} of {baseline.requests}, at most {_pct(b_hi)})",
            )
    if hi <= slo.max_error_rate and n >= min_requests:
        return Check("errors", PASS, f"{said}, within {_pct(slo.max_error_rate)}")
    need = max(min_requests, requests_to_pass(slo.max_error_rate, c) if k == 0 else n + 1)
    return Check("errors", INCONCLUSIVE, f"{said}: cannot yet show <= {_pct(slo.max_error_rate)} (needs >= {need} requests)")


def _latency(
    name: str, q: float, limit: float | None, hist: Histogram, base: Histogram | None, slo: SloConfig, min_requests: int, requests: float
) -> Check:
    label = f"{name} p{q * 100:g}"
    allowed, c = 1.0 - q, slo.confidence
    n = hist.count
    if requests < MIN_TIMED:
        return Check(label, INCONCLUSIVE, f"{requests:.0f} timed requests, {MIN_TIMED} before any latency verdict")
    thresholds: list[tuple[float, str]] = []
    if limit is not None:
        thresholds.append((limit, f"limit {limit:g}s"))
    undecided: list[str] = []
    if base is not None:
        base_need = requests_to_pass(allowed, 0.5)  # ~1/(1-q): fewer and the baseline's quantile is its maximum
        bq = base.quantile(q)
        if base.count >= base_need and bq is not None:
            ratio = max(slo.max_ratio * bq, slo.ratio_floor_seconds)
            t = hist.bound_at_or_above(ratio)
            said = f"{slo.max_ratio:g}x baseline {bq:.3f}s" + (f" = {ratio:.3f}s, at its bucket's bound" if t != ratio else "")
            thresholds.append((t, said))
        else:
            undecided.append(f"baseline has {base.count:.0f} timed requests, its {label} needs >= {base_need}")
    mine = hist.quantile(q)
    passed = []
    for t, what in thresholds:
        surely, possibly = hist.above(t)
        lo, hi = lower_bound(surely, n, c), upper_bound(possibly, n, c)
        if lo > allowed:
            return Check(
                label,
                FAIL,
                f"{_s(mine)} over {t:.3f}s ({what}): {surely:.0f} of {n:.0f} took longer (at least {_pct(lo)}, {_pct(allowed)} allowed)",
            )
        if hi <= allowed and n >= min_requests:
            passed.append(f"<= {t:.3f}s ({what})")
        else:
            undecided.append(f"{possibly:.0f} of {n:.0f} may be over {t:.3f}s ({what}): at most {_pct(hi)}, {_pct(allowed)} allowed")
    if not thresholds and not undecided:
        return Check(label, PASS, f"{_s(mine)} (no limit set, no baseline to compare with)")
    if undecided:
        return Check(label, INCONCLUSIVE, f"{_s(mine)}; " + "; ".join(undecided))
    return Check(label, PASS, f"{_s(mine)} " + ", ".join(passed))
