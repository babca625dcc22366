"""Canary steps and the bake window, decision by decision, against the FAKE host of the runbook tests
(extended with weighted splits) and a FAKE meter whose instances serve scripted traffic: so many requests
per interval, a share failing, a time to first token. Fakes inject what real instances cannot be told to
do on demand; the real path (nginx weights, vLLM's histograms, the access log) is in
tests/integration/test_canary.py. Everything runs on the fake clock: milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import UsageError
from ernie_ops.host import state
from ernie_ops.traffic import cutover
from ernie_ops.traffic.accesslog import Outcomes
from ernie_ops.traffic.canary import rollout, rollout_file
from ernie_ops.traffic.canary.watch import Tick
from ernie_ops.traffic.canary.window import Histogram, Scrape
from tests.harness.runbook_host import NEW, OLD, FakeHost

BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, float("inf"))


class SplitHost(FakeHost):
    """FakeHost plus canary splits: `weights` is what the include says (port -> percent)."""

    weights: dict[int, int]

    def __init__(self, **kw):
        super().__init__(units={OLD: "active", NEW: "active"}, **kw)
        self.weights = {OLD: 100}

    def split(self, source: int, target: int, percent: int, sticky: str) -> None:
        self._call("split", target, percent)
        self.weights = {source: 100 - percent, target: percent}
        self.file_port = source
        self._done("split")

    def switch(self, port: int) -> None:
        super().switch(port)
        self.weights = {port: 100}

    def wall(self) -> float:
        return 1.9e9 + self.now


@dataclass
class Behaviour:
    rate: float = 40.0  # requests per second at 100% of traffic
    fail_share: float = 0.0
    ttft: float = 0.03
    alive: bool = True
    slow_first: int = 0  # the first requests (a fresh engine's warm-up) take 10 s to the first token


@dataclass
class FakeMeter:
    """Instances that serve their share of traffic (from the host's weights) as their Behaviour says."""

    host: SplitHost
    behaviour: dict[int, Behaviour]
    interval: float = 0.5
    counts: dict[int, dict] = field(default_factory=dict)
    wanted: dict[int, bool] = field(default_factory=dict)
    synthetic_rate: float = 10.0
    problem: str | None = None
    closed: bool = False
    quieted: bool = False

    def tick(self) -> Tick:
        out, scrapes = Outcomes(), {}
        for port, b in self.behaviour.items():
            c = self.counts.setdefault(port, {"ok": 0.0, "error": 0.0, "ttft": dict.fromkeys(BOUNDS, 0.0)})
            share = self.host.weights.get(port, 0) / 100
            n = int(b.rate * share * self.interval) + (
                int(self.synthetic_rate * self.interval) if self.wanted.get(port) and not self.quieted else 0
            )
            bad = round(n * b.fail_share)
            c["ok"] += n - bad
            c["error"] += bad
            slow = max(0, min(n, b.slow_first - c.setdefault("seen", 0)))
            c["seen"] += n
            for le in BOUNDS:
                c["ttft"][le] += (n - slow if b.ttft <= le else 0) + (slow if le >= 10.0 else 0)
            out.requests[port] += n
            out.failed[port] += bad
            if not b.alive:
                scrapes[port] = "does not answer /metrics (ConnectError)"
                continue
            hist = Histogram(tuple(c["ttft"].items()))
            scrapes[port] = Scrape(1000.0 + port, hist, hist, {"stop": c["ok"], "error": c["error"]})
        return Tick(self.host.now, scrapes, out, self.problem)

    def want(self, port: int, on: bool) -> None:
        assert not self.quieted, "synthetic requests asked for after the watch ended"
        self.wanted[port] = on

    def quiet(self) -> None:
        self.quieted = True

    def close(self) -> None:
        self.closed = True


GATE = """
cutover:
  step_min_seconds: 5
  step_min_requests: 20
  step_max_seconds: 60
  interval_seconds: 0.5
  window_seconds: 2
  slo: {max_error_rate: 0.05, ttft_quantile: 0.9, ttft_seconds: 1.0, itl_quantile: 0.9, itl_seconds: 1.0,
        max_ratio: 2.0, ratio_floor_seconds: 0.0}
"""


@pytest.fixture
def cfg(tmp_path: Path) -> config.Config:
    c = config.parse(f"gateway:\n  url: http://127.0.0.1:9\npaths:\n  state_dir: {tmp_path / 'state'}\n{GATE}")
    state.record(tmp_path / "state", {"kind": "cutover", "target": OLD}, active_port=OLD, previous_port=None)
    return c


def run(cfg, host, behaviour, steps, bake=0.0, action=None, target=NEW):
    meters: list[FakeMeter] = []

    def factory(ports):
        meters.append(FakeMeter(host, behaviour))
        return meters[-1]

    res = cutover.Cutover(cfg, target, host=host, plan=rollout.Plan(steps, bake), action=action, meter_factory=factory).run()
    return res, meters


def history(cfg) -> dict:
    return state.load(Path(cfg.paths.state_dir)).history[-1]


def test_a_healthy_canary_steps_through_then_bakes_then_retires_the_old_instance(cfg):
    host = SplitHost()
    res, meters = run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [5, 25, 50], bake=10)
    assert res.ok and res.outcome == "promoted", res
    assert [c for c in host.mutations() if c[0] in ("switch", "stop")] == [("switch", NEW), ("stop", OLD)]
    assert [c for c in host.calls if c[0] == "split"] == [("split", NEW, 5), ("split", NEW, 25), ("split", NEW, 50)]
    h = history(cfg)
    verdicts = [(d["what"], d["verdict"]["result"]) for d in h["decisions"] if "verdict" in d]
    assert verdicts == [("canary 1/3", "pass"), ("canary 2/3", "pass"), ("canary 3/3", "pass"), ("bake", "pass")]
    assert h["plan"] == "canary 5%,25%,50% then bake 10s" and h["outcome"] == "promoted"
    assert state.load(Path(cfg.paths.state_dir)).active_port == NEW
    assert rollout_file.load(Path(cfg.paths.state_dir)) is None and meters[0].closed and meters[0].quieted
    # each step held its minimum time on the fake clock, and the bake its window
    steps = {s.name: s.seconds for s in res.steps if s.name.startswith(("canary", "bake")) and s.seconds}
    assert all(v >= 5 for k, v in steps.items() if k.startswith("canary")), steps


def test_at_5_percent_a_quiet_canary_gets_synthetic_requests_until_it_can_be_judged(cfg):
    host = SplitHost()
    res, meters = run(cfg, host, {OLD: Behaviour(rate=4), NEW: Behaviour(rate=4)}, [5])
    assert res.ok, res
    first = next(d for d in history(cfg)["decisions"] if "verdict" in d)
    assert first["verdict"]["result"] == "pass"
    # 5% of 4 req/s is nothing: every request the canary was judged on was the gate's own
    assert meters[0].wanted[NEW] is False  # turned off again once the window held enough


def test_on_a_quiet_host_the_gate_asks_for_more_requests_while_a_few_slow_ones_leave_it_undecided(cfg):
    host = SplitHost()  # no outside traffic: every request is the gate's own; the canary's first 2 are slow
    res, meters = run(cfg, host, {OLD: Behaviour(rate=0), NEW: Behaviour(rate=0, slow_first=2)}, [50])
    assert res.ok and res.outcome == "promoted", res  # 2 of the first 59 could be 10.6%: only more requests tell
    verdict = next(d for d in history(cfg)["decisions"] if "verdict" in d)["verdict"]
    assert verdict["result"] == "pass" and int(verdict["canary"].split()[1]) > 59, verdict  # '8001: 65 req, ...'
    assert meters[0].wanted == {OLD: False, NEW: False}


def test_a_canary_with_errors_is_rolled_back_at_its_first_step(cfg):
    host = SplitHost()
    res, _ = run(cfg, host, {OLD: Behaviour(), NEW: Behaviour(fail_share=0.3)}, [5, 50])
    assert not res.ok and res.outcome == "rolled-back", res
    assert res.error.startswith("canary 1/2 (5%) failed the gate: errors:") and "above max_error_rate 5.0%" in res.error
    assert ("split", NEW, 50) not in host.calls
    assert host.weights == {OLD: 100} and host.units[NEW] == "inactive" and host.units[OLD] == "active"
    assert state.load(Path(cfg.paths.state_dir)).active_port == OLD
    assert res.traffic == OLD and "traffic is back on 8000" in res.where


def test_a_slow_canary_fails_on_its_ttft_against_the_baseline(cfg):
    host = SplitHost()
    res, _ = run(cfg, host, {OLD: Behaviour(ttft=0.03), NEW: Behaviour(ttft=0.2)}, [5])
    assert not res.ok and "ttft p90" in res.error and "2x baseline" in res.error, res.error


def test_a_canary_that_dies_mid_step_is_rolled_back(cfg):
    host = SplitHost()
    beh = {OLD: Behaviour(), NEW: Behaviour()}
    meters: list[FakeMeter] = []

    def factory(ports):
        meters.append(FakeMeter(host, beh))
        return meters[-1]

    orig = host.sleep

    def sleep(s):
        orig(s)
        if host.now > 2:
            beh[NEW].alive = False

    host.sleep = sleep
    res = cutover.Cutover(cfg, NEW, host=host, plan=rollout.Plan([5], 0), meter_factory=factory).run()
    assert not res.ok and "8001 does not answer /metrics" in res.error, res


def test_a_step_that_stays_inconclusive_is_rolled_back_at_step_max(cfg):
    host = SplitHost()
    beh = {OLD: Behaviour(rate=0), NEW: Behaviour(rate=0)}

    def factory(ports):
        m = FakeMeter(host, beh, synthetic_rate=0)  # no traffic and no synthetic requests: never enough data
        return m

    res = cutover.Cutover(cfg, NEW, host=host, plan=rollout.Plan([5], 0), meter_factory=factory).run()
    assert not res.ok and "could not be judged within step_max_seconds 60" in res.error, res
    assert "no requests yet" in res.error


def test_a_breach_in_the_bake_goes_back_to_the_warm_old_instance(cfg):
    host = SplitHost()
    beh = {OLD: Behaviour(), NEW: Behaviour()}
    orig = host.sleep

    def sleep(s):
        orig(s)
        if host.now > 20:
            beh[NEW].fail_share = 0.5

    host.sleep = sleep
    res, _ = run(cfg, host, beh, [], bake=600)
    assert not res.ok and "the bake window failed the gate (recent window)" in res.error, res
    assert [c for c in host.mutations() if c[0] in ("switch", "stop")] == [("switch", NEW), ("switch", OLD), ("stop", NEW)]
    assert host.units[OLD] == "active"
    rollback = next(s for s in res.steps if s.name == "rollback")
    assert rollback.seconds < 1.0


def test_promote_and_abort_requests_reach_the_watcher(cfg, tmp_path):
    for asked, outcome, routed in (("promote", "promoted", NEW), ("abort", "rolled-back", OLD)):
        host = SplitHost()
        orig = host.sleep
        sent = []

        def sleep(s, asked=asked, orig=orig, sent=sent):
            orig(s)
            if not sent:
                rollout_file.request(tmp_path / "state", asked)
                sent.append(1)

        host.sleep = sleep
        res, _ = run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [5, 50], bake=600)
        assert res.outcome == outcome and host.weights == {routed: 100}, res
        assert any(d["what"] == asked for d in history(cfg)["decisions"])


def test_a_killed_rollout_is_taken_over_by_the_same_command_and_refuses_another_target(cfg):
    host = SplitHost()
    host.kill = "split"  # the watcher dies right after nginx took the first step (KeyboardInterrupt stands for the kill)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [5, 50])
    pending = rollout_file.load(Path(cfg.paths.state_dir))
    assert pending is not None and pending.phase == "canary" and pending.target == NEW
    with pytest.raises(UsageError, match=r"a rollout to 8001 is in progress .*cutover --abort"):
        run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [5], target=OLD)
    host.kill = None
    res, _ = run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [])  # the plan comes from the rollout file
    assert res.ok and res.outcome == "promoted"
    assert history(cfg)["decisions"][0]["what"] == "take over"
    assert ("split", NEW, 50) in host.calls


def test_abort_with_no_watcher_routes_back_and_stops_the_canary(cfg):
    host = SplitHost()
    host.kill = "split"
    with pytest.raises(KeyboardInterrupt):
        run(cfg, host, {OLD: Behaviour(), NEW: Behaviour()}, [25])
    host.kill = None
    res, _ = run(cfg, host, {}, [], action="abort")
    assert res.outcome == "rolled-back" and "aborted by `ernie-ops cutover --abort`" in res.error
    assert host.weights == {OLD: 100} and host.units[NEW] == "inactive"
    assert rollout_file.load(Path(cfg.paths.state_dir)) is None


def test_promote_or_abort_with_nothing_in_progress_is_a_usage_error(cfg):
    with pytest.raises(UsageError, match="nothing to promote"):
        run(cfg, SplitHost(), {}, [], action="promote")
    with pytest.raises(UsageError, match="no canary or bake window is in progress"):
        cutover.end_rollout(cfg, "abort", host=SplitHost())


@pytest.mark.parametrize(("text", "seconds"), [("600", 600), ("90s", 90), ("10m", 600), ("1.5h", 5400), ("250ms", 0.25), ("0", 0)])
def test_durations(text, seconds):
    assert rollout.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["ten minutes", "-5m", "5d", ""])
def test_bad_durations_say_how_to_write_one(text):
    with pytest.raises(UsageError, match="is not a duration; write seconds or a number with s, m or h"):
        rollout.parse_duration(text)


@pytest.mark.parametrize("text", ["5,5", "50,25", "0,50", "5,100", "five"])
def test_bad_canary_steps_are_refused(text):
    with pytest.raises(UsageError, match="--canary"):
        rollout.parse_steps(text)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["cutover"], "name the instance to route to: ernie-ops cutover PORT (or --promote / --abort)"),
        (["cutover", "8001", "--abort"], "--promote / --abort end the rollout in progress; give no port"),
        (["cutover", "--abort"], "no canary or bake window is in progress: nothing to abort"),
        (["cutover", "--promote", "--bake", "10m"], "give no port, --from, --canary or --bake"),
        (["cutover", "8001", "--bake", "soon"], "'soon' is not a duration"),
        (["cutover", "8001", "--canary", "50,25"], "--canary 50,25: steps must rise between 1 and 99 percent"),
    ],
)
def test_cutover_command_line_mistakes_are_sentences(tmp_path, capsys, argv, said):
    from ernie_ops import cli

    cfg_file = tmp_path / "ernie.yaml"
    cfg_file.write_text(f"gateway:\n  url: http://127.0.0.1:9\n  upstream_file: {tmp_path / 'up.conf'}\npaths:\n  state_dir: {tmp_path}\n")
    code = cli.main(["--config", str(cfg_file), *argv])
    err = capsys.readouterr().err
    assert code == 2 and said in " ".join(err.split()), err
    assert "Traceback" not in err


def test_a_first_route_has_nothing_to_watch_against_and_says_so(cfg):
    host = SplitHost()
    host.file_port = host.live_port = None
    host.units[OLD] = "inactive"
    res, meters = run(cfg, host, {}, [5], bake=600)
    assert res.ok and res.outcome == "switched" and not meters, res
    assert res.warnings == ["nothing was routed before: no canary 5% then bake 600s (no old instance to compare with or go back to)"]


def test_when_routing_back_fails_nothing_is_stopped_and_the_rollout_stays_for_status_and_abort(cfg):
    host = SplitHost()
    real_switch = host.switch

    def switch(port):
        if port == OLD:
            raise RuntimeError("nginx reload failed: injected")
        real_switch(port)

    host.switch = switch
    res, _ = run(cfg, host, {OLD: Behaviour(), NEW: Behaviour(fail_share=0.5)}, [5])
    assert res.outcome == "rollback-failed" and not res.ok and "then routing back to 8000 failed" in res.error, res
    assert host.units == {OLD: "active", NEW: "active"}  # the canary may still carry traffic: never stopped
    assert rollout_file.load(Path(cfg.paths.state_dir)) is not None and "cutover --abort" in res.where
    host.switch = real_switch
    res, _ = run(cfg, host, {}, [], action="abort")
    assert res.outcome == "rolled-back" and host.weights == {OLD: 100} and host.units[NEW] == "inactive"


def test_a_fault_of_the_watch_itself_rolls_back(cfg):
    host = SplitHost()

    class Broken(FakeMeter):
        def tick(self):
            if self.host.now > 1:
                raise ValueError("a bug")
            return super().tick()

    res = cutover.Cutover(
        cfg, NEW, host=host, plan=rollout.Plan([5], 0), meter_factory=lambda ports: Broken(host, {OLD: Behaviour(), NEW: Behaviour()})
    ).run()
    assert res.outcome == "rolled-back" and "the watch itself failed (ValueError: a bug)" in res.error
    assert host.weights == {OLD: 100}


@pytest.mark.parametrize(
    ("behaviour", "outcome", "routed", "stopped"),
    [
        ({OLD: Behaviour(), NEW: Behaviour(fail_share=0.5)}, "rolled-back", OLD, NEW),
        ({OLD: Behaviour(), NEW: Behaviour()}, "promoted", NEW, OLD),
    ],
    ids=["mid-rollback", "mid-promotion"],
)
def test_a_kill_during_an_ending_is_finished_by_the_rerun_never_watched_again(cfg, behaviour, outcome, routed, stopped):
    host = SplitHost()
    host.kill = "stop"  # killed while stopping the instance that lost
    with pytest.raises(KeyboardInterrupt):
        run(cfg, host, behaviour, [5])
    pending = rollout_file.load(Path(cfg.paths.state_dir))
    assert pending.phase == ("rollback" if outcome == "rolled-back" else "promote"), pending
    host.kill = None
    splits = len([c for c in host.calls if c[0] == "split"])
    res, meters = run(cfg, host, behaviour, [5])  # the same command again
    assert res.outcome == outcome and host.weights == {routed: 100} and host.units[stopped] == "inactive", res
    assert len([c for c in host.calls if c[0] == "split"]) == splits and not meters  # no new step, nothing judged
    take_over = next(d for d in history(cfg)["decisions"] if d["what"] == "take over")
    assert "finishing the rollback" in take_over["text"] if outcome == "rolled-back" else "finishing the promotion" in take_over["text"]
    assert rollout_file.load(Path(cfg.paths.state_dir)) is None


def test_ctrl_c_during_a_watch_asks_for_an_abort_and_a_second_one_interrupts(tmp_path):
    import os
    import signal

    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        rollout_file.save(tmp_path, rollout_file.Rollout(target=NEW, source=OLD, steps=[5], bake_seconds=0))
        rollout.abort_on_signals(tmp_path)
        os.kill(os.getpid(), signal.SIGINT)
        assert rollout_file.take_request(tmp_path) == "abort"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        rollout_file.clear(tmp_path)
        rollout.abort_on_signals(tmp_path)
        with pytest.raises(KeyboardInterrupt):  # no watch yet (start, gate): an interrupt as before
            os.kill(os.getpid(), signal.SIGINT)
        assert rollout_file.take_request(tmp_path) is None
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def test_an_unreadable_access_log_is_said_once_and_the_gate_goes_on(cfg):
    host = SplitHost()
    said = "cannot read the gateway's access log /var/log/nginx/ernie-ops.access.log (gateway.access_log): Permission denied"

    def factory(ports):
        return FakeMeter(host, {OLD: Behaviour(), NEW: Behaviour()}, problem=said)

    res = cutover.Cutover(cfg, NEW, host=host, plan=rollout.Plan([5], 0), meter_factory=factory).run()
    assert res.ok and res.outcome == "promoted", res
    assert [w for w in res.warnings if "access log" in w] == [f"{said}; errors are judged from vLLM's counters only"]
