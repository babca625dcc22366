"""The pool's canary SLO (traffic/canary/replica_gate.py): a new replica judged against the old ones still serving,
on a FAKE meter whose replicas serve scripted traffic (so many requests a second each, a share failing, a time to
first token) and a fake clock: what real replicas cannot be told to do on demand. The real path is the e2e pool
test (tests/e2e/test_cutover.py), where each replica of an in-place upgrade passes this gate under load."""

from __future__ import annotations

from dataclasses import dataclass, field

from ernie_ops import config
from ernie_ops.traffic.accesslog import Outcomes
from ernie_ops.traffic.canary import slo
from ernie_ops.traffic.canary.replica_gate import ReplicaGate
from ernie_ops.traffic.canary.watch import Tick
from ernie_ops.traffic.canary.window import Histogram, Scrape

BOUNDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, float("inf"))
CO = config.parse("""
cutover:
  step_min_seconds: 5
  step_min_requests: 20
  step_max_seconds: 30
  interval_seconds: 0.5
  window_seconds: 2
  slo: {max_error_rate: 0.05, ttft_quantile: 0.9, ttft_seconds: 1.0, itl_quantile: 0.9, itl_seconds: 1.0,
        max_ratio: 2.0, ratio_floor_seconds: 0.0}
""").cutover


@dataclass
class Replica:
    rate: float = 20.0  # requests a second: its share of the pool's traffic
    fail_share: float = 0.0
    ttft: float = 0.03


@dataclass
class PoolMeter:
    replicas: dict[int, Replica]
    clock: list[float]
    counts: dict[int, dict] = field(default_factory=dict)
    wanted: dict[int, bool] = field(default_factory=dict)
    closed: bool = False
    quieted: bool = False

    def tick(self) -> Tick:
        scrapes, out = {}, Outcomes()
        for port, r in self.replicas.items():
            c = self.counts.setdefault(port, {"ok": 0.0, "error": 0.0, "ttft": dict.fromkeys(BOUNDS, 0.0), "t": self.clock[0]})
            n = int(r.rate * (self.clock[0] - c["t"])) + (5 if self.wanted.get(port) else 0)
            c["t"] = self.clock[0]
            bad = round(n * r.fail_share)
            c["ok"], c["error"] = c["ok"] + n - bad, c["error"] + bad
            for le in BOUNDS:
                c["ttft"][le] += n if r.ttft <= le else 0
            hist = Histogram(tuple(c["ttft"].items()))
            scrapes[port] = Scrape(1000.0 + port, hist, hist, {"stop": c["ok"], "error": c["error"]})
        return Tick(self.clock[0], scrapes, out)

    def want(self, port: int, on: bool) -> None:
        self.wanted[port] = on

    def quiet(self) -> None:
        self.quieted = True

    def close(self) -> None:
        self.closed = True


def gate(replicas: dict[int, Replica]) -> tuple[ReplicaGate, list[PoolMeter], list[float]]:
    clock, meters = [0.0], []

    def factory(ports: list[int]) -> PoolMeter:
        meters.append(PoolMeter({p: replicas[p] for p in ports}, clock))
        return meters[-1]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return ReplicaGate(CO, factory, sleep), meters, clock


def test_a_healthy_new_replica_passes_after_the_step_minimum_against_the_old_ones_pooled():
    g, meters, clock = gate({8000: Replica(), 8001: Replica(), 8002: Replica()})
    v = g.judge(8001, [8000, 8002])
    assert v.result == slo.PASS and clock[0] >= CO.step_min_seconds and clock[0] < 10
    assert v.baseline is not None and v.baseline.label == "8000+8002" and v.baseline.requests >= 2 * v.canary.requests - 10
    assert meters[0].quieted and meters[0].closed  # no synthetic request outlives the gate (a drain follows)


def test_a_new_replica_failing_requests_or_slow_against_the_old_ones_fails_fast():
    g, _, clock = gate({8000: Replica(), 8001: Replica(fail_share=0.5)})
    v = g.judge(8001, [8000])
    assert v.result == slo.FAIL and "errors" in v.reason and "above max_error_rate" in v.reason and clock[0] < 5
    g, _, _ = gate({8000: Replica(ttft=0.03), 8001: Replica(ttft=0.4)})  # 13x the old ones, under the 1 s limit
    v = g.judge(8001, [8000])
    assert v.result == slo.FAIL and "x baseline" in v.reason, v.reason


def test_the_last_replica_has_no_old_one_left_and_is_judged_by_the_limits_alone():
    g, _, _ = gate({8001: Replica(ttft=0.4)})
    assert g.judge(8001, []).result == slo.PASS  # 0.4 s is within ttft_seconds 1.0: no ratio without a baseline
    g, _, _ = gate({8001: Replica(ttft=3.0)})
    v = g.judge(8001, [])
    assert v.result == slo.FAIL and "limit 1s" in v.reason, v.reason


def test_a_quiet_pool_gets_synthetic_requests_and_an_idle_one_is_undecided_at_the_step_maximum():
    g, meters, clock = gate({8000: Replica(rate=0.0), 8001: Replica(rate=0.0)})
    v = g.judge(8001, [8000])
    assert v.result == slo.PASS and meters[0].wanted  # the gate's own requests filled both sides
    quiet = ReplicaGate(CO, lambda ports: NoSynthetic({p: Replica(rate=0.0) for p in ports}, clock), g.sleep)
    clock[0] = 0.0
    v = quiet.judge(8001, [8000])
    assert v.result == slo.INCONCLUSIVE and clock[0] >= CO.step_max_seconds and "no requests yet" in v.reason


class NoSynthetic(PoolMeter):
    def want(self, port: int, on: bool) -> None:  # its synthetic requests never arrive
        pass


def test_pooled_sides_sum_and_a_side_that_cannot_be_measured_is_left_out():
    a = slo.Side(8000, requests=10, failed=1, ttft=Histogram(((0.1, 8.0), (1.0, 10.0), (float("inf"), 10.0))))
    b = slo.Side(8002, requests=5, ttft=Histogram(((0.5, 5.0), (float("inf"), 5.0))))
    both = slo.pooled([a, b, slo.Side(8004, problem="8004 does not answer /metrics")])
    assert (both.requests, both.failed, both.label) == (15, 1, "8000+8002+8004")
    assert both.ttft.buckets == ((0.1, 8.0), (0.5, 13.0), (1.0, 15.0), (float("inf"), 15.0))
    none = slo.pooled([slo.Side(8000, problem="restarted"), slo.Side(8002, problem="does not answer")])
    assert none.problem == "restarted; does not answer"


def test_the_bake_judges_the_new_replicas_together_for_its_whole_time_and_fails_at_once():
    g, _, clock = gate({8001: Replica(), 8003: Replica()})
    v = g.bake([8001, 8003], 20)
    assert v.result == slo.PASS and 20 <= clock[0] < 21 and v.canary.label == "8001+8003"
    g, _, clock = gate({8001: Replica(), 8003: Replica(fail_share=0.6)})
    v = g.bake([8001, 8003], 20)
    assert v.result == slo.FAIL and clock[0] < 5 and "above max_error_rate" in v.reason, v.reason
