"""The cutover runbook's decisions and undo, step by step, against a FAKE host (tests/harness/runbook_host.py,
ernie_ops/traffic/hostops.py's interface): a failure at every step, what was done and undone, where traffic ends up, which units run,
and what the (real) state file in tmp_path says. The fake exists to inject faults on demand (a refused
reload, a unit that will not stop, a kill in the middle); the real host is covered by
tests/integration/test_cutover_nginx.py and the e2e fault matrix (tests/e2e/test_cutover.py).
Deadlines run on the fake's clock, so the whole table takes milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import ProbeFailed
from ernie_ops.host import state
from ernie_ops.traffic import cutover
from ernie_ops.traffic.runbook import CutoverResult, Outcome, Timeouts
from tests.harness.runbook_host import MUTATIONS, NEW, OLD, FakeHost, make_cfg


def state_of(tmp_path: Path) -> tuple[int | None, int | None, int]:
    st = state.load(tmp_path / "state")
    return st.active_port, st.previous_port, len(st.history)


@pytest.fixture
def cfg(tmp_path: Path) -> config.Config:
    """OLD routed and serving, as recorded by an earlier cutover."""
    c = make_cfg(tmp_path)
    state.record(tmp_path / "state", {"kind": "cutover", "target": OLD}, active_port=OLD, previous_port=None)
    return c


START, SWITCH = ("start", NEW), ("switch", NEW)
ENABLE, DISABLE = [("enable", NEW), ("disable", OLD)], [("disable", OLD)]
RESTORE, STOP_NEW, STOP_OLD = ("restore", OLD), ("stop", NEW), ("stop", OLD)
BOTH_UP, NEW_UP, OLD_UP = {OLD: "active", NEW: "active"}, {OLD: "inactive", NEW: "active"}, {OLD: "active", NEW: "inactive"}
RECORDED_NEW, UNCHANGED = (NEW, OLD, 2), (OLD, None, 2)  # (active, previous, history entries) in state.json

# id, fault, outcome, steps (name, ok), host calls that changed something, traffic, units, state, warning
TABLE = [
    ("preflight-memory", {"fail": {"memory"}}, "aborted", [("preflight", False)], [], OLD, OLD_UP, UNCHANGED, None),
    ("preflight-nginx-t", {"fail": {"nginx_test"}}, "aborted", [("preflight", False)], [], OLD, OLD_UP, UNCHANGED, None),
    ("preflight-nginx-down", {"nginx_up": False}, "aborted", [("preflight", False)], [], None, OLD_UP, UNCHANGED, None),
    ("preflight-port-held", {"foreign": {NEW}}, "aborted", [("preflight", False)], [], OLD, OLD_UP, UNCHANGED, None),
    ("start", {"fail": {"start"}}, "aborted", [("start", False), ("undo: stop new", True)], [START, STOP_NEW], OLD, OLD_UP,
     UNCHANGED, None),
    ("gate", {"fail": {"gate"}}, "aborted", [("start", True), ("gate", False), ("undo: stop new", True)], [START, STOP_NEW], OLD, OLD_UP,
     UNCHANGED, None),
    ("gate+undo-stop", {"fail": {"gate", "stop"}}, "aborted", [("start", True), ("gate", False), ("undo: stop new", False)],
     [START, STOP_NEW], OLD, BOTH_UP, UNCHANGED, "undo: stop new failed"),
    ("switch", {"fail": {"switch"}}, "rolled-back", [("switch", False), ("undo: restore upstream", True), ("undo: stop new", True)],
     [START, SWITCH, RESTORE, STOP_NEW], OLD, OLD_UP, UNCHANGED, None),
    ("switch+undo-restore", {"fail": {"switch", "restore"}}, "rolled-back",
     [("switch", False), ("undo: restore upstream", False), ("undo: stop new", True)],
     [START, SWITCH, RESTORE, STOP_NEW], OLD, OLD_UP, UNCHANGED, "undo: restore upstream failed"),
    ("verify", {"stuck_reload": True}, "rolled-back", [("switch", True), ("verify", False), ("undo: restore upstream", True),
     ("undo: stop new", True)], [START, SWITCH, RESTORE, STOP_NEW], OLD, OLD_UP, UNCHANGED, None),
    ("enable", {"fail": {"enable"}}, "switched", [("enable", False), ("drain", True), ("stop", True)],
     [START, SWITCH, ("enable", NEW), STOP_OLD], NEW, NEW_UP, RECORDED_NEW, "boot state: injected: enable 8001"),
    ("drain-never-empty", {"busy": {OLD}}, "switched", [("enable", True), ("drain", True), ("stop", True)],
     [START, SWITCH, *ENABLE, STOP_OLD], NEW, NEW_UP, RECORDED_NEW, "8000 still had 2 running + 0 waiting after 120s"),
    ("drain-error", {"fail": {"metrics"}}, "switched", [("enable", True), ("drain", False)],
     [START, SWITCH, *ENABLE], NEW, BOTH_UP, RECORDED_NEW, "retiring 8000: injected: metrics 8000"),
    ("stop", {"fail": {"stop"}}, "switched", [("enable", True), ("drain", True), ("stop", False)],
     [START, SWITCH, *ENABLE, STOP_OLD], NEW, BOTH_UP, RECORDED_NEW, "retiring 8000: injected: stop 8000"),
    ("record", {"record": "unwritable"}, "switched", [("enable", True), ("drain", True), ("stop", True)],
     [START, SWITCH, *ENABLE, STOP_OLD], NEW, NEW_UP, None, "the state file in"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "outcome", "steps", "mutations", "traffic", "units", "recorded", "warning"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_a_failure_at_each_step(cfg, tmp_path, fault, outcome, steps, mutations, traffic, units, recorded, warning):
    fault = dict(fault)
    unwritable = fault.pop("record", None)
    host = FakeHost(**fault)
    if unwritable:  # a real fault: state.json is a directory, so the record cannot be written
        (tmp_path / "state" / "state.json").unlink()
        (tmp_path / "state" / "state.json").mkdir()
    res = cutover.Cutover(cfg, NEW, host=host).run()

    assert res.outcome == outcome and res.ok == (outcome == "switched"), res
    assert [(s.name, s.ok) for s in res.steps][-len(steps) :] == steps
    assert host.mutations() == mutations  # what was done, then undone, in order
    routed = OLD if outcome != "switched" else NEW
    assert (host.file_port, host.live_port) == (routed, routed)
    assert res.traffic == traffic and host.units == units
    assert (warning is None and res.warnings == []) or any(warning in w for w in res.warnings), res.warnings
    if recorded is not None:
        assert state_of(tmp_path) == recorded
    history = [] if unwritable else state.load(tmp_path / "state").history
    if history:
        assert history[-1]["outcome"] == outcome
    if outcome == "switched":
        failed_enable = "enable" in fault.get("fail", ())  # then nothing is enabled or disabled
        assert host.enabled == ({OLD: True, NEW: False} if failed_enable else {OLD: False, NEW: True}) and res.where == ""
    else:
        assert host.enabled == {OLD: True, NEW: False}  # boot state untouched


def test_nginx_not_running_aborts_before_starting_anything_and_says_nothing_serves(cfg):
    host = FakeHost(nginx_up=False)
    res = cutover.Cutover(cfg, NEW, host=host).run()
    assert res.outcome == "aborted" and "nginx is not running" in res.error and "nothing was changed" in res.error
    assert not [c for c in host.calls if c[0] in MUTATIONS | {"unit_state", "gate"}]  # nothing started, not even looked at
    assert res.traffic is None and "no instance serves through the gateway" in res.where
    assert "put back" not in res.where and "keeps serving" not in res.where


@pytest.mark.parametrize(
    ("fault", "where"),
    [
        ({"fail": {"gate"}}, "the old instance 8000 keeps serving"),
        ({"fail": {"switch"}}, "traffic was put back on the old instance 8000"),
        ({"fail": {"switch"}, "units": {OLD: "failed", NEW: "inactive"}}, "no instance serves through the gateway"),
    ],
    ids=["aborted", "rolled-back", "rolled-back-old-dead"],
)
def test_where_traffic_is_after_a_failure_is_what_the_gateway_answered(cfg, fault, where):
    res = cutover.Cutover(cfg, NEW, host=FakeHost(**fault)).run()
    assert where in res.where, res.where


def test_a_cutover_when_nothing_is_routed_never_claims_an_old_instance(tmp_path):
    host = FakeHost(file_port=None, live_port=None, units={OLD: "inactive", NEW: "inactive"}, fail={"switch"})
    res = cutover.Cutover(make_cfg(tmp_path), NEW, host=host).run()
    assert res.outcome == "rolled-back" and res.source is None and res.traffic is None
    assert "old instance" not in res.where and "no instance serves" in res.where
    assert host.mutations() == [START, SWITCH, ("restore", None), STOP_NEW]


def test_verify_gives_up_on_the_clock_not_on_the_wall(cfg):
    host = FakeHost(stuck_reload=True)
    res = cutover.Cutover(cfg, NEW, host=host, timeouts=Timeouts(verify=15)).run()
    assert res.outcome == "rolled-back" and "did not route to 8001 within 15s" in res.error
    assert 15 <= host.now < 15.1 and res.seconds("verify") < 1  # fake time passed, real time did not


# -- convergence: PORT already routed -------------------------------------------------------------


def test_already_routed_and_serving_changes_nothing(tmp_path):
    c = make_cfg(tmp_path)
    state.record(tmp_path / "state", {"kind": "cutover"}, active_port=NEW, previous_port=OLD)
    host = FakeHost(file_port=NEW, live_port=NEW, units=dict(NEW_UP), enabled={OLD: False, NEW: True})
    res = cutover.Cutover(c, NEW, host=host).run()
    assert res.ok and res.outcome == "already-active" and [s.name for s in res.steps] == ["gate", "verify"]
    assert host.mutations() == [] and state_of(tmp_path) == (NEW, OLD, 1)


def test_routed_but_not_serving_is_an_error_and_changes_nothing(tmp_path):
    c = make_cfg(tmp_path)
    host = FakeHost(file_port=NEW, live_port=NEW, units=dict(OLD_UP))
    with pytest.raises(ProbeFailed, match="8001/health does not answer"):
        cutover.Cutover(c, NEW, host=host).run()
    assert host.mutations() == []


@pytest.mark.parametrize(
    ("kill", "units_after_kill"),
    [
        ({"kill": "stop"}, NEW_UP),  # systemd finished the stop job the killed `systemctl stop` had queued
        ({"kill_before": "stop"}, BOTH_UP),  # killed before the stop reached systemd
        ({"kill": "enable"}, BOTH_UP),
        ({"kill": "switch"}, OLD_UP | {NEW: "active"}),  # upstream.conf written, nginx not reloaded
        ({"kill_before": "gateway_health"}, BOTH_UP),  # killed in verify
    ],
    ids=["stop-done", "stop-not-done", "enable", "switch-before-reload", "verify"],
)
def test_killed_cutover_then_rerun_converges_and_records_old_as_previous(cfg, tmp_path, kill, units_after_kill):
    host = FakeHost(**kill)
    with pytest.raises(KeyboardInterrupt):
        cutover.Cutover(cfg, NEW, host=host).run()
    assert host.units == units_after_kill and host.file_port == NEW
    assert state_of(tmp_path) == (OLD, None, 1)  # killed before its record

    host.kill = host.kill_before = None
    res = cutover.Cutover(cfg, NEW, host=host).run()
    assert res.ok and res.outcome == "converged" and res.source == OLD, res
    assert state_of(tmp_path) == (NEW, OLD, 2)
    assert json.loads((tmp_path / "state" / "state.json").read_text())["history"][-1]["source"] == OLD
    assert host.units == NEW_UP and host.enabled == {OLD: False, NEW: True}
    assert (host.file_port, host.live_port) == (NEW, NEW)
    # and a rollback afterwards goes back to the old instance
    back = cutover.rollback(cfg, host=host)
    assert back.ok and back.target == OLD and host.units == OLD_UP and state_of(tmp_path) == (OLD, NEW, 3)


def test_converge_reloads_nginx_that_did_not_load_the_routed_port(tmp_path):
    c = make_cfg(tmp_path)
    state.record(tmp_path / "state", {"kind": "cutover"}, active_port=NEW, previous_port=OLD)
    host = FakeHost(file_port=NEW, live_port=OLD, units=dict(NEW_UP), enabled={OLD: False, NEW: True})
    res = cutover.Cutover(c, NEW, host=host).run()
    assert res.outcome == "converged" and [s.name for s in res.steps] == ["gate", "verify", "switch", "verify", "enable"]
    assert host.mutations() == [("reload",), ("enable", NEW)] and host.live_port == NEW
    assert state_of(tmp_path) == (NEW, OLD, 2)  # the previous port the state file knew is kept


# -- dry run ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "target", "ok", "steps"),
    [({}, NEW, True, ["preflight"]), ({"nginx_up": False}, NEW, False, ["preflight"]), ({}, OLD, True, [])],
    ids=["preflight-passes", "nginx-down", "target-already-routed"],
)
def test_dry_run_runs_only_the_preflight_and_changes_nothing(cfg, tmp_path, fault, target, ok, steps):
    host = FakeHost(**fault)
    res = cutover.Cutover(cfg, target, dry_run=True, host=host).run()
    assert res.ok is ok and [s.name for s in res.steps] == steps
    assert host.mutations() == [] and not [c for c in host.calls if c[0] in ("unit_state", "gate")]
    assert state_of(tmp_path)[:2] == (OLD, None)
    if ok and steps:
        assert res.outcome == "dry-run" and "route 8000 -> 8001" in res.steps[0].detail


def test_outcomes_are_written_as_the_words_the_cli_state_json_and_dashboards_read():
    words = {"pending", "switched", "already-active", "converged", "dry-run", "promoted", "aborted", "rolled-back", "rollback-failed", "?"}
    assert {str(o) for o in Outcome} == words and {f"{o}" for o in Outcome} == words
    res = CutoverResult(target=NEW, source=OLD, outcome=Outcome.ROLLED_BACK)
    assert json.dumps(res.as_dict()).startswith('{"target": 8001, "source": 8000, "outcome": "rolled-back",')
    assert Outcome.recorded("promoted") is Outcome.PROMOTED and Outcome.recorded(None) is Outcome.UNKNOWN
