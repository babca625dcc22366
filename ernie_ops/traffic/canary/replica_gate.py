"""The canary SLO of a pool upgrade (issue 33): each new replica judged against the replicas still on the old version.

In a pool the canary's steps are the replicas: a new replica in rotation carries its share of the traffic as a
canary step would, so there is no split to set. Once the upgrade has put a new replica in rotation, this gate
watches it beside the old replicas still serving, with the cutover's own settings (`cutover.step_min_seconds`,
`step_min_requests`, `step_max_seconds`, `interval_seconds`, `window_seconds`, `slo`): the old replicas' counters
summed are the baseline (`slo.pooled`); with none left (the last replica of the pool) latency is judged against the
absolute limits only, as in a bake. The verdict is returned, never acted on here: a pass after step_min_seconds lets
the upgrade go on; a fail, or a verdict still inconclusive after step_max_seconds, stops it (`pool_upgrade` undoes
what it can). The gate's own synthetic requests fill a side that has too few, as the single-instance canary's do.
"""

from __future__ import annotations

from collections.abc import Callable

from ernie_ops.config import CutoverConfig
from ernie_ops.traffic.canary import slo
from ernie_ops.traffic.canary.watch import Meter, Windows, feed


class ReplicaGate:
    """`judge(new, baseline)`: one replica's SLO verdict over its own window; `bake(ports, seconds)`: the new replicas
    together, over `seconds` and against the absolute limits (`meter_factory`: a Meter of the ports)."""

    def __init__(self, co: CutoverConfig, meter_factory: Callable[[list[int]], Meter], sleep: Callable[[float], None]):
        self.co, self.meter_factory, self.sleep = co, meter_factory, sleep

    def judge(self, new: int, baseline: list[int]) -> slo.Verdict:
        co = self.co

        def verdict(w: Windows) -> slo.Verdict:
            base = slo.pooled([w.phase(p) for p in baseline]) if baseline else None
            return slo.judge(w.phase(new), base, co.slo, co.step_min_requests)

        return self._watch([new, *baseline], verdict, co.step_min_seconds, co.step_max_seconds)

    def bake(self, ports: list[int], seconds: float) -> slo.Verdict:
        """Every new replica as one side (`slo.pooled`) for `seconds`: a fail at once, a pass once the time is up;
        still undecided step_max_seconds after it, the verdict as it stands."""
        co = self.co

        def verdict(w: Windows) -> slo.Verdict:
            return slo.judge(slo.pooled([w.phase(p) for p in ports]), None, co.slo, co.step_min_requests)

        return self._watch(list(ports), verdict, seconds, seconds + co.step_max_seconds)

    def _watch(self, ports: list[int], verdict: Callable[[Windows], slo.Verdict], least: float, most: float) -> slo.Verdict:
        """Measure `ports` every interval until the verdict fails, passes after `least` seconds, or `most` have gone;
        the gate's own requests fill a replica whose share of the window is short, and every one while undecided
        (`watch.feed`, as the single-instance canary's)."""
        co = self.co
        meter = self.meter_factory(ports)
        try:
            w = Windows(meter.tick(), co.window_seconds)
            need = slo.target_requests(co.slo, co.step_min_requests)
            while True:
                self.sleep(co.interval_seconds)
                w.add(meter.tick())
                v = verdict(w)
                if v.result == slo.FAIL or (v.result == slo.PASS and w.seconds >= least) or w.seconds >= most:
                    return v
                feed(meter, w, ports, need, v)
        finally:
            meter.quiet()  # before any drain that follows: a drain waits for no request in flight
            meter.close()
