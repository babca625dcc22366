"""The pool upgrade (traffic/pool_upgrade.py) on a fake host (tests/harness/pool_host.py): every step's path and
every undo, in milliseconds."""

from __future__ import annotations

from ernie_ops.config import EvalGateConfig
from ernie_ops.traffic.canary import slo
from ernie_ops.traffic.pool_plan import ReplicaStep
from ernie_ops.traffic.pool_upgrade import PoolUpgrade
from ernie_ops.traffic.runbook import DRAIN_SETTLE_SECONDS, Timeouts
from tests.harness.pool_host import FakePoolHost


def surge(slot: int, old: int, new: int, size: int = 2) -> ReplicaStep:
    return ReplicaStep(slot, f"gpu {slot}", old, new, size, size)


def in_place(slot: int, port: int, size: int = 2) -> ReplicaStep:
    return ReplicaStep(slot, f"cores {slot}", port, port, size - 1, size, "the slot has no second port")


def gpu_host() -> FakePoolHost:
    return FakePoolHost(units={8000: "active", 8002: "active"}, rotation=[8000, 8002])


def test_surges_replace_each_replica_by_its_slots_second_port_and_all_keep_serving():
    host = gpu_host()
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)]).run()
    assert res.ok and res.replicas == [8001, 8003] and res.down == [] and res.error is None
    assert host.in_rotation() == [8001, 8003] and host.units == {8000: "inactive", 8001: "active", 8002: "inactive", 8003: "active"}
    assert host.enabled == {8001: True, 8000: False, 8003: True, 8002: False}
    assert host.versions == {8001: (0, "new"), 8003: (1, "new")}  # the state file: each replica's version, old ones gone
    # the new one is in place (one rewrite) before the old one stops: the pool never has fewer than 2 in rotation
    assert host.calls[:5] == [("start", 8001), ("gate", 8001), ("route", (8001, 8002), ()), ("stop", 8000), ("enable", 8001)]
    assert [s.name for s in res.steps][:6] == [
        "slot 0 (gpu 0): start 8001", "slot 0 (gpu 0): gate 8001", "slot 0 (gpu 0): 8001 in place of 8000",
        "slot 0 (gpu 0): drain 8000", "slot 0 (gpu 0): stop 8000", "slot 0 (gpu 0): 8001 at boot",
    ]  # fmt: skip


def test_a_new_replica_already_serving_is_adopted():
    host = gpu_host()
    host.units[8001] = "active"
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)]).run()
    assert res.ok and ("start", 8001) not in host.calls and res.steps[0].detail == "adopted 8001 (already serving)"


def test_in_place_steps_take_each_replica_out_drain_restart_gate_and_put_it_back():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001])
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000), in_place(1, 8001)]).run()
    assert res.ok and res.replicas == [8000, 8001] and host.in_rotation() == [8000, 8001]
    assert host.calls[:5] == [
        ("route", (8000, 8001), (8000,)),
        ("stop", 8000),
        ("start", 8000),
        ("gate", 8000),
        ("route", (8000, 8001), ()),
    ]


def test_a_surge_whose_new_replica_cannot_start_stops_it_keeps_the_old_and_runs_no_further_step():
    host = gpu_host()
    host.fail.add(("start", 8001))
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)]).run()
    assert not res.ok and res.replicas == [8000, 8002] and host.in_rotation() == [8000, 8002]
    assert res.error.startswith("slot 0 (gpu 0): ernie-vllm@8001.service did not start: engine exited with code 1 while loading")
    assert "8001 stopped, 8000 kept serving; 2 of 2 replicas serve: 8000, 8002" in res.error
    assert ("stop", 8001) in host.calls and ("start", 8003) not in host.calls and host.units[8000] == "active"


def test_a_surge_whose_new_replica_fails_its_gate_or_whose_include_nginx_refuses_is_undone():
    for fault in ("gate", "route"):
        host = gpu_host()
        if fault == "gate":
            host.fail.add(("gate", 8001))
        else:
            host.refuse_routes_from = 1
        res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)]).run()
        assert not res.ok and res.replicas == [8000, 8002] and host.rotation == [8000, 8002], fault
        assert host.units[8001] == "inactive" and host.units[8000] == "active", fault
        assert ("does not answer 200" if fault == "gate" else "nginx -t failed") in res.error, res.error


def test_an_in_place_replica_that_does_not_come_back_stays_out_of_rotation_and_says_what_to_do():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001])
    host.fail.add(("start", 8000))
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000), in_place(1, 8001)]).run()
    assert not res.ok and res.down == [8000] and host.in_rotation() == [8001]
    assert "8000 stays out of rotation (1 of 2 replicas serve: 8001)" in res.error
    assert "run `ernie-ops apply` again (it replaces a held replica again), or put the previous version back" in res.error
    assert res.held == {8000: res.held[8000]} and "did not start" in res.held[8000] and host.held == res.held  # the watch leaves it out
    assert ("route", (8000, 8001), (8000, 8001)) not in host.calls  # slot 1 untouched


def test_an_in_place_step_nginx_refuses_to_take_out_changes_nothing():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001], refuse_routes_from=1)
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000)]).run()
    assert not res.ok and "nothing changed for 8000; 2 of 2 replicas serve" in res.error
    assert host.units == {8000: "active", 8001: "active"} and [c[0] for c in host.calls] == ["route"]


def test_a_replica_back_on_the_new_version_that_nginx_refuses_to_put_back_is_named():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001], refuse_routes_from=2)
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000)]).run()
    assert not res.ok and res.down == [8000] and host.units[8000] == "active"
    assert "8000 serves the new version but nginx -t failed" in res.error and "it stays out of rotation" in res.error


def test_an_old_replica_that_never_drains_is_stopped_after_the_bound():
    host = gpu_host()
    host.busy.add(8000)
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)], Timeouts(drain=5)).run()
    drain = next(s for s in res.steps if s.name.endswith("drain 8000"))
    assert res.ok and "still had requests after 5 s" in drain.detail and host.units[8000] == "inactive" and host.now >= 5


def test_a_replica_the_watch_had_taken_out_stays_out_while_the_others_are_replaced():
    host = FakePoolHost(units={8000: "active", 8002: "active"}, rotation=[8000, 8002], down=frozenset({8002}))
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)], down=frozenset({8002})).run()
    assert res.ok and host.in_rotation() == [8001] and res.down == [8002]


GOLDEN = EvalGateConfig(file="/etc/ernie-ops/golden.yaml")


def test_the_first_new_replica_passes_the_quality_gate_before_any_traffic_and_the_others_are_not_asked_again():
    host = gpu_host()
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)], eval_gate=GOLDEN).run()
    assert res.ok and [c for c in host.calls if c[0] == "evaluate"] == [("evaluate", 8001), ("evaluate", 8000)]
    assert host.calls.index(("evaluate", 8001)) < host.calls.index(("route", (8001, 8002), ()))
    quality = next(s for s in res.steps if "quality" in s.name)
    assert quality.name == "slot 0 (gpu 0): quality 8001" and "within 0% of the old" in quality.detail


def test_a_first_new_replica_that_fails_the_golden_set_gets_no_traffic_and_is_stopped():
    host = gpu_host()
    host.evals[8001] = [("hello", False)]
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)], eval_gate=GOLDEN).run()
    assert not res.ok and host.rotation == [8000, 8002] and host.units[8001] == "inactive"
    assert "quality: 8001 passed 0 of 1 case" in res.error and "failing hello" in res.error


def test_in_place_the_new_version_is_judged_against_a_replica_still_on_the_old_one():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001])
    host.evals[8000] = [("hello", False)]
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000)], eval_gate=GOLDEN).run()
    assert not res.ok and res.down == [8000] and ("evaluate", 8001) in host.calls
    assert "quality: 8000 passed 0 of 1 case" in res.error and "stays out of rotation" in res.error


class ScriptedSlo:
    """The SLO gate's verdicts per new replica (default: pass), and the baselines it was asked to compare with."""

    def __init__(self, verdicts: dict[int, str] | None = None):
        self.verdicts, self.asked = verdicts or {}, []

    def judge(self, new: int, baseline: list[int]) -> slo.Verdict:
        self.asked.append((new, baseline))
        result = self.verdicts.get(new, slo.PASS)
        check = slo.Check("ttft p90", result, "0.400s over 0.060s (2x baseline 0.030s)" if result == slo.FAIL else "0.030s")
        return slo.Verdict(result, [check], slo.Side(new), None)


def test_each_new_replica_is_judged_against_the_old_ones_still_serving_before_its_old_one_drains():
    host = FakePoolHost(units={8000: "active", 8002: "active", 8004: "active"}, rotation=[8000, 8002, 8004])
    gate = ScriptedSlo()
    steps = [surge(0, 8000, 8001, 3), surge(1, 8002, 8003, 3), surge(2, 8004, 8005, 3)]
    res = PoolUpgrade(host, [8000, 8002, 8004], steps, slo_gate=gate).run()
    assert res.ok and gate.asked == [(8001, [8002, 8004]), (8003, [8004]), (8005, [])]  # the last: the limits alone
    names = [s.name for s in res.steps]
    assert names.index("slot 0 (gpu 0): SLO 8001") < names.index("slot 0 (gpu 0): drain 8000")


def test_a_surge_replica_failing_the_slo_gives_its_place_back_to_the_warm_old_one_and_stops():
    host = gpu_host()
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)], slo_gate=ScriptedSlo({8001: slo.FAIL})).run()
    assert not res.ok and res.replicas == [8000, 8002] and host.in_rotation() == [8000, 8002]
    assert host.units == {8000: "active", 8001: "inactive", 8002: "active"}  # 8000 never stopped, slot 1 never began
    assert ("stop", 8000) not in host.calls and res.held == {}
    assert "8001 failed the SLO gate: ttft p90: 0.400s over 0.060s" in res.error and "8000 back in rotation, 8001 stopped" in res.error


def test_a_surge_replica_failing_the_slo_whose_way_back_nginx_refuses_keeps_serving_and_nothing_stops():
    host = gpu_host()
    host.refuse_routes_from = 2  # the new one's rewrite is taken; putting the old one back is refused
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)], slo_gate=ScriptedSlo({8001: slo.FAIL})).run()
    assert not res.ok and host.in_rotation() == [8001, 8002] and host.units[8000] == host.units[8001] == "active"
    assert "putting 8000 back failed: nginx -t failed" in res.error and "both run, 8001 serves" in res.error


def test_in_place_a_replica_failing_the_slo_is_held_out_and_the_next_apply_replaces_it_again():
    host = FakePoolHost(units={8000: "active", 8001: "active"}, rotation=[8000, 8001])
    res = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000), in_place(1, 8001)], slo_gate=ScriptedSlo({8000: slo.INCONCLUSIVE})).run()
    assert not res.ok and host.in_rotation() == [8001] and list(res.held) == [8000] and host.held == res.held
    assert "could not be judged by the SLO gate in time" in res.held[8000] and "is held out of rotation (1 of 2" in res.error
    assert ("stop", 8001) not in host.calls  # slot 1 keeps the old version and serves
    # the next run (apply plans a held replica again): the hold goes once its step passes every gate
    rerun = PoolUpgrade(host, [8000, 8001], [in_place(0, 8000)], slo_gate=ScriptedSlo(), held=res.held).run()
    assert rerun.ok and rerun.held == {} and host.held == {} and host.in_rotation() == [8000, 8001]


def test_a_hold_survives_the_rewrites_of_other_slots():
    host = FakePoolHost(units={8000: "active", 8002: "active"}, rotation=[8000, 8002], held={8002: "failed the SLO gate"})
    host.down = frozenset({8002})
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)], held=dict(host.held)).run()
    assert res.ok and host.held == {8002: "failed the SLO gate"} and host.in_rotation() == [8001]


class BakingSlo(ScriptedSlo):
    def __init__(self, verdicts: dict[int, str] | None = None, bake: str = slo.PASS):
        super().__init__(verdicts)
        self.bake_result, self.baked = bake, []

    def bake(self, ports: list[int], seconds: float) -> slo.Verdict:
        self.baked.append((ports, seconds))
        check = slo.Check("errors", self.bake_result, "9 of 40 failed" if self.bake_result == slo.FAIL else "0 of 40 failed")
        return slo.Verdict(self.bake_result, [check], slo.Side(ports[0]), None)


def test_with_a_bake_the_old_replicas_of_a_surge_stay_loaded_until_the_whole_pool_passed_it():
    host = gpu_host()
    gate = BakingSlo()
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)], slo_gate=gate, bake_seconds=30).run()
    assert res.ok and gate.baked == [([8001, 8003], 30)] and host.in_rotation() == [8001, 8003]
    names = [s.name for s in res.steps]
    assert names.index("pool: bake 30 s") < names.index("slot 0 (gpu 0): stop 8000")  # no old replica stopped before
    assert host.units == {8000: "inactive", 8001: "active", 8002: "inactive", 8003: "active"}


def test_a_failed_bake_puts_every_surge_back_on_its_old_replica_still_loaded():
    host = gpu_host()
    gate = BakingSlo(bake=slo.FAIL)
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), surge(1, 8002, 8003)], slo_gate=gate, bake_seconds=30).run()
    assert not res.ok and res.replicas == [8000, 8002] and host.in_rotation() == [8000, 8002]
    assert host.units == {8000: "active", 8001: "inactive", 8002: "active", 8003: "inactive"}
    assert ("stop", 8000) not in host.calls and ("stop", 8002) not in host.calls  # never cold: no start to wait for
    assert res.error.startswith("the pool's bake (8001, 8003) failed: errors: 9 of 40 failed")
    assert host.versions == {}  # the new replicas were stopped again: the state file names none
    assert "rolled back to the old version on 8002, 8000 (loaded all along)" in res.error


def test_a_later_slot_failing_rolls_the_earlier_loaded_surges_back_too_and_says_what_stays_new():
    host = FakePoolHost(units={8000: "active", 8002: "active", 8004: "active"}, rotation=[8000, 8002, 8004])
    host.fail.add(("start", 8003))
    steps = [surge(0, 8000, 8001, 3), surge(1, 8002, 8003, 3), in_place(2, 8004, 3)]
    res = PoolUpgrade(host, [8000, 8002, 8004], steps, slo_gate=BakingSlo(), bake_seconds=30).run()
    assert not res.ok and host.in_rotation() == [8000, 8002, 8004] and host.units[8001] == "inactive"
    assert "8003 stopped, 8002 kept serving" in res.error and "rolled back to the old version on 8000" in res.error
    # an in-place replica cannot go back: the sentence names it
    host = FakePoolHost(units={8000: "active", 8002: "active"}, rotation=[8000, 8002])
    gate = BakingSlo(bake=slo.FAIL)
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001), in_place(1, 8002)], slo_gate=gate, bake_seconds=5).run()
    assert not res.ok and host.in_rotation() == [8000, 8002]
    assert "rolled back to the old version on 8000" in res.error and "8002 stay on the new version (replaced in place" in res.error
    # all in place: a failed bake says every replica runs the new version and what to do
    host = FakePoolHost(units={8000: "active", 8002: "active"}, rotation=[8000, 8002])
    res = PoolUpgrade(host, [8000, 8002], [in_place(0, 8000), in_place(1, 8002)], slo_gate=BakingSlo(bake=slo.FAIL), bake_seconds=5).run()
    assert not res.ok and "rolled back" not in res.error and "8000, 8002 stay on the new version" in res.error, res.error
    assert "put the previous version back with upgrade.yml" in res.error and host.in_rotation() == [8000, 8002]


def test_a_drain_waits_for_the_replica_to_stay_idle_not_for_its_first_idle_reading():
    """A request handed to the replica just before the include changed may still be in vLLM's API server, uncounted
    by the engine's gauges: the first idle reading does not end the drain, an idle second (DRAIN_SETTLE_SECONDS) does."""

    readings = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # idle, then the late request shows up in the engine, then done

    class LateRequest(FakePoolHost):
        def in_flight(self, port: int) -> float | None:
            return readings.pop(0) if port == 8000 and readings else super().in_flight(port)

    host = LateRequest(units={8000: "active", 8002: "active"}, rotation=[8000, 8002])
    res = PoolUpgrade(host, [8000, 8002], [surge(0, 8000, 8001)]).run()
    drain = next(s for s in res.steps if s.name.endswith("drain 8000"))
    assert res.ok and drain.detail == "8000 idle after 2.5 s" and host.calls.index(("stop", 8000)) > 0, drain
    assert DRAIN_SETTLE_SECONDS == 1.0
