"""`ernie-ops cutover PORT`: move traffic to another instance with zero lost requests. A runbook:

  1. preflight  config valid, PORT is an instance and not already routed, memory budget for two
                instances side by side, current nginx config passes `nginx -t`, nginx's master runs
  2. start      `systemctl start ernie-vllm@PORT` (blocks until READY), or adopt a running one
  3. gate       /health 200, /v1/models lists the model, a real completion
     quality    with cutover.eval.file: the golden set against the new instance and the old one; the new one
                must reach min_pass_rate and be at most max_drop below the old (not on a rollback)
  4. switch     upstream include rewritten atomically, `nginx -t`, graceful reload
  5. verify     requests through the gateway are served by PORT
  6. drain      the old instance's running + waiting requests reach 0 (bounded)
  7. stop       `systemctl stop` of the old instance (vLLM's own drain covers the rest)
  8. record     history in the state file

The preflight checks that cutover.eval.file loads (a dry run too); the quality step runs it before any traffic
moves, a canary's first step included. An old instance that cannot be evaluated is not held against the new one
(a warning: moving away from a broken instance must stay possible); a new one that cannot be reached fails it.

Undo: a failure before the switch stops the new instance (the old one never stopped serving); a
failure at switch/verify puts the old upstream back, reloads, and stops the new instance. Steps
6-7 come after traffic is verified on the new instance, so their failures are reported, never
rolled back. Re-running after a crash converges: if PORT is already routed, leftovers are
drained and stopped, and the state file gets the record the crashed run did not write (previous =
the instance the state file still names as active).

Everything done to the host goes through `host` (ernie_ops/traffic/hostops.py: `RealHost` unless one is
given), so the undo logic is unit-tested against a fake host (tests/harness/runbook_host.py).
On a failure the result says where traffic is (`traffic`: the port that answered through the
gateway, `where`: the sentence the CLI prints), from one request through the gateway.

A watched cutover (`--canary`, `--bake`) hands over after the gate to `canary.rollout.Watch`, which drives
this runbook through its public verbs (`runbook.Runbook`); `Step`, `CutoverResult` and `Outcome` live in
`runbook`, which both import.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError, ProbeFailed, UsageError
from ernie_ops.evaluate import gate as quality
from ernie_ops.host import state, systemd
from ernie_ops.traffic import marks
from ernie_ops.traffic.canary import rollout, rollout_file
from ernie_ops.traffic.hostops import HostOps, RealHost
from ernie_ops.traffic.runbook import CutoverResult, Idle, Outcome, Step, Timeouts


class CutoverFailed(ErnieOpsError):
    """A step failed; the result says what was undone."""


class Cutover:
    """The runbook (module docstring). Its public verbs (`runbook.Runbook`) are what the canary watch drives it by:
    step, report, warn, split, switch, route_to, retire, follow_at_boot, serving_port, where, record."""

    def __init__(
        self,
        cfg: Config,
        target: int,
        source: int | None = None,
        timeouts: Timeouts | None = None,
        dry_run: bool = False,
        on_step: Callable[[Step], None] | None = None,
        kind: str = "cutover",
        host: HostOps | None = None,
        plan: rollout.Plan | None = None,
        action: str | None = None,
        meter_factory: Callable | None = None,
    ):
        self.cfg = cfg
        self.target = target
        self.source_arg = source
        self.t = timeouts or Timeouts()
        self.dry_run = dry_run
        self.on_step = on_step or (lambda step: None)
        self.kind = kind
        self._own_host = RealHost(cfg) if host is None else None  # closed at the end of run()
        self.host: HostOps = host if host is not None else self._own_host
        self.state_dir = Path(cfg.paths.state_dir)
        self.result = CutoverResult(target=target, source=source)
        self.plan = plan or rollout.Plan([], 0.0)
        self.action = action  # promote | abort: end the rollout in progress (no watcher runs it now)
        self.meter_factory = meter_factory

    # -- step bookkeeping ------------------------------------------------------------------
    def step(self, name: str, fn: Callable[[], str]) -> None:
        """Run one named step, recorded in the result and shown as it ends; its exception propagates."""
        t0 = time.monotonic()
        try:
            detail = fn() or ""
        except Exception as exc:
            self.report(Step(name, False, time.monotonic() - t0, str(exc)))
            raise
        self.report(Step(name, True, time.monotonic() - t0, detail))

    def report(self, step: Step) -> None:
        """Record and show a step taken outside `step` (a decision of the canary watch)."""
        self.result.steps.append(step)
        self.on_step(step)

    def warn(self, text: str) -> None:
        """A warning in the result: something went wrong that does not fail the run."""
        self.result.warnings.append(text)

    # -- runbook ---------------------------------------------------------------------------
    def run(self) -> CutoverResult:
        self.cfg.instance(self.target)  # invalid port: usage error before the lock or anything else
        try:
            with state.cutover_lock(self.state_dir, f"{self.kind} to {self.target}"):
                return self._run_locked()
        finally:
            if self._own_host:
                self._own_host.close()

    def _run_locked(self) -> CutoverResult:
        r = self.result
        pending = rollout_file.load(self.state_dir)
        if pending is not None:
            return self._take_over(pending)
        if self.action is not None:
            raise UsageError(f"no canary or bake window is in progress: nothing to {self.action}")
        active = self.host.active_port()
        source = self.source_arg if self.source_arg is not None else active
        r.source = source
        if active == self.target:
            if self.dry_run:
                r.outcome, r.ok = Outcome.DRY_RUN, True
                return r
            return self._converge()
        if source is not None and source == self.target:
            raise UsageError(f"source and target are both {self.target}")

        try:
            self.step("preflight", lambda: self._preflight(source))
        except UsageError:
            raise
        except Exception as exc:
            return self._fail(Outcome.ABORTED, exc)
        if self.dry_run:
            r.outcome, r.ok = Outcome.DRY_RUN, True
            return r
        try:
            self._start_or_adopt()
            self.step("gate", self._gate)
            if self._gated():
                self.step("quality", lambda: self._quality(source))
        except Exception as exc:
            self._undo_step("undo: stop new", lambda: self._stop(self.target))
            return self._fail(Outcome.ABORTED, exc)

        if self.plan.watched and source is not None:
            rollout_file.take_request(self.state_dir)  # a request left from an earlier rollout is not for this one
            record = rollout.start_record(self.target, source, self.plan)
            return rollout.Watch(self, record, self.meter_factory).run()
        if self.plan.watched:
            self.warn(f"nothing was routed before: no {self.plan.describe()} (no old instance to compare with or go back to)")

        previous_upstream = self.host.read_upstream()
        try:
            self.switch()
        except Exception as exc:
            # switch() already put the old file back if nginx refused it; restoring again is harmless
            self._undo_step("undo: restore upstream", lambda: self._restore(previous_upstream))
            self._undo_step("undo: stop new", lambda: self._stop(self.target))
            return self._fail(Outcome.ROLLED_BACK, exc)

        r.outcome, r.ok, r.traffic = Outcome.SWITCHED, True, self.target
        self.follow_at_boot(source)
        if source is not None:
            self.retire(source)
        self.record()
        return r

    def _take_over(self, pending: rollout_file.Rollout) -> CutoverResult:
        """A rollout file is there and this process holds the lock: its watcher is gone (killed). End it as
        asked (--promote / --abort), or resume it where it stands when the same target is asked for again."""
        self.result.source = pending.source
        watch = rollout.Watch(self, pending, self.meter_factory)
        alive = f"pid {pending.pid}" + ("" if pending.watcher_alive() else " (gone)")
        if pending.phase == "rollback":  # an ending under way is finished whatever was asked
            watch.decide("take over", f"{pending.describe()}, left by {alive}: finishing the rollback")
            return watch.roll_back(pending.ending or "rollback under way")
        if pending.phase == "promote":
            watch.decide("take over", f"{pending.describe()}, left by {alive}: finishing the promotion")
            return watch.promote()
        if self.action == "abort":
            return watch.roll_back(f"aborted by `ernie-ops {self.kind} --abort` ({pending.describe()}, left by {alive})")
        if self.action == "promote":
            watch.decide("take over", f"{pending.describe()}, left by {alive}: promoting as asked")
            return watch.promote()
        if self.target != pending.target:
            raise UsageError(
                f"a rollout to {pending.target} is in progress ({pending.describe()}); resume it with "
                f"`ernie-ops cutover {pending.target}`, or end it with `ernie-ops cutover --abort` / `--promote`"
            )
        watch.decide("take over", f"{pending.describe()}, left by {alive}: resuming")
        return watch.run()

    def _fail(self, outcome: Outcome, exc: Exception) -> CutoverResult:
        r = self.result
        r.outcome, r.ok, r.error = outcome, False, str(exc)
        r.traffic = self.serving_port()
        r.where = self.where()
        self.record()
        return r

    # -- where traffic is ------------------------------------------------------------------
    def serving_port(self) -> int | None:
        """The instance that answers /health through the gateway now (one request); None if none does."""
        answer = self.host.gateway_health()
        if answer is None or answer[0] != 200:
            return None
        port = answer[1].rpartition(":")[2]
        return int(port) if port.isdigit() else None

    def where(self) -> str:
        """Where traffic is after a failure, said only as far as the gateway showed it."""
        r, source = self.result, self.result.source
        if r.traffic is None:
            return f"no instance serves through the gateway ({self.cfg.gateway.url}); check `ernie-ops status`"
        if r.traffic == source and r.outcome == Outcome.ABORTED:
            return f"the old instance {source} keeps serving"
        if r.traffic == source:
            return f"traffic was put back on the old instance {source}"
        return f"the gateway is served by {r.traffic}; check `ernie-ops status`"

    # -- steps -----------------------------------------------------------------------------
    def _preflight(self, source: int | None) -> str:
        problem = self.host.memory_problem(source, self.target)
        if problem:
            raise CutoverFailed(f"memory budget: {problem}")
        self.host.nginx_test()
        problem = self.host.nginx_problem()
        if problem:
            raise CutoverFailed(problem)
        problem = self.host.port_problem(self.target)
        if problem:
            raise CutoverFailed(problem)
        if self._gated() and (problem := quality.set_problem(self.cfg.cutover.eval)):
            raise CutoverFailed(f"cutover.eval.file {self.cfg.cutover.eval.file}: {problem}")
        plan = f"route {source} -> {self.target}" if source else f"route -> {self.target} (nothing routed now)"
        return f"{plan}; nginx -t ok, nginx runs"

    def _start_or_adopt(self) -> None:
        """A running, serving target is adopted; an abort stops the target either way (it gets no traffic)."""
        if self.host.unit_state(self.target) == "active":
            try:
                self.host.gate(self.target)
                self.step("start", lambda: f"adopted running {systemd.unit_name(self.target)} (already serving)")
                return
            except ProbeFailed:
                pass  # running but not serving: the gate below decides
        self.step("start", self._systemctl_start)

    def _systemctl_start(self) -> str:
        self.host.start(self.target, timeout=self.t.start)
        return f"{systemd.unit_name(self.target)} READY"

    def _gate(self) -> str:
        g = self.host.gate(self.target)
        return f"/health ok, serves {self.cfg.model.served_name}, completion {g.finish_reason} in {g.seconds:.2f}s"

    def _gated(self) -> bool:
        """The quality gate runs when a set is configured; a rollback goes back to the instance that served, and
        must stay quick and possible when the set or the eval is what broke."""
        return self.cfg.cutover.eval.file is not None and self.kind != "rollback"

    def _quality(self, source: int | None) -> str:
        gate = self.cfg.cutover.eval
        assert gate.file is not None
        new = self.host.evaluate(gate.file, self.target)  # TargetDown: the run's own sentence fails the step
        old = None
        if source is not None:
            try:
                old = self.host.evaluate(gate.file, source)
            except ErnieOpsError as exc:
                self.warn(f"quality: the old instance {source} could not be evaluated ({exc}); judged by min_pass_rate only")
        verdict = quality.judge(gate, self.target, new, source if old is not None else None, old)
        if not verdict.ok:
            raise CutoverFailed(verdict.sentence)
        return verdict.sentence

    def switch(self) -> None:
        """All traffic to the target, verified through the gateway (the steps switch and verify)."""
        self.step("switch", self._switch)
        self.step("verify", self._verify)

    def _switch(self) -> str:
        self.host.switch(self.target)
        return f"upstream -> 127.0.0.1:{self.target}, nginx -t ok, reloaded"

    def split(self, source: int, target: int, percent: int, sticky: str) -> None:
        """`percent` of the traffic to `target`, the rest to `source` (nginx reloaded)."""
        self.host.split(source, target, percent, sticky)

    def route_to(self, port: int) -> None:
        """All traffic to `port`, verified through the gateway; not a step (the caller records its decision)."""
        self.host.switch(port)
        self._verify(port)

    def _verify(self, port: int | None = None) -> str:
        """The gateway answers from the target several times in a row (old workers may answer briefly)."""
        port = self.target if port is None else port
        want, streak, seen = f":{port}", 0, []
        deadline = self.host.monotonic() + self.t.verify
        while self.host.monotonic() < deadline:
            answer = self.host.gateway_health()
            if answer is None:
                streak = 0
            else:
                status, upstream = answer
                seen.append(upstream)
                streak = streak + 1 if status == 200 and upstream.endswith(want) else 0
            if streak >= 3:
                return f"gateway /health served by 127.0.0.1:{port}"
            self.host.sleep(0.05)
        raise CutoverFailed(f"gateway did not route to {port} within {self.t.verify:.0f}s (last upstreams: {seen[-3:]})")

    def _drain(self, port: int) -> str:
        """Until the old instance has been idle for DRAIN_SETTLE_SECONDS (runbook.py says why), at most t.drain."""
        deadline = self.host.monotonic() + self.t.drain
        last, idle = None, Idle()
        while (now := self.host.monotonic()) < deadline:
            last = self.host.metrics(port)
            if last is None:
                return "old instance does not answer /metrics (already gone)"
            if idle.settled(now, last.in_flight):
                return f"{port}: 0 running, 0 waiting"
            self.host.sleep(0.2)
        warning = (
            f"{port} still had {last.running:.0f} running + {last.waiting:.0f} waiting after {self.t.drain:.0f}s; "
            f"stopping it anyway (vLLM drains {self.cfg.vllm.shutdown_drain_seconds}s more)"
        )
        self.warn(warning)
        return warning

    def retire(self, port: int) -> None:
        """Drain and stop an instance that no longer gets traffic; failures are warnings."""
        try:
            self.step("drain", lambda: self._drain(port))
            self.step("stop", lambda: self._stop(port))
        except Exception as exc:
            self.warn(f"retiring {port}: {exc}")

    def follow_at_boot(self, source: int | None) -> None:
        """The routed instance is the one enabled at boot; failures are warnings (traffic has moved)."""

        def enable() -> str:
            self.host.set_enabled(self.target, True)
            if source is not None and source != self.target:
                self.host.set_enabled(source, False)
            return f"{systemd.unit_name(self.target)} enabled" + (f", {systemd.unit_name(source)} disabled" if source else "")

        try:
            self.step("enable", enable)
        except Exception as exc:
            self.warn(f"boot state: {exc}")

    def _stop(self, port: int) -> str:
        self.host.stop(port, timeout=self.t.stop)
        return f"{systemd.unit_name(port)} stopped"

    def record(self, extra: dict | None = None) -> None:
        """The result (and `extra`) to the history in state.json and the cutover marks."""
        r = self.result
        entry = {
            "kind": self.kind,
            "target": r.target,
            "source": r.source,
            "outcome": r.outcome,
            "error": r.error,
            "steps": {s.name: round(s.seconds, 3) for s in r.steps},
            **(extra or {}),
        }
        try:
            if r.ok:
                st = state.record(self.state_dir, entry, active_port=r.target, previous_port=r.source if r.source != r.target else None)
            else:
                old = state.load(self.state_dir)
                st = state.record(self.state_dir, entry, active_port=old.active_port, previous_port=old.previous_port)
            r.warnings.extend(st.warnings)  # a corrupt state file kept aside
        except state.StateDirError as exc:
            self.warn(f"the history was not recorded: {exc}")
        if (warning := marks.write(self.cfg)) is not None:
            self.warn(warning)

    # -- undo ------------------------------------------------------------------------------
    def _restore(self, previous_text: str) -> str:
        self.host.restore(previous_text)
        return "previous upstream restored, nginx reloaded"

    def _undo_step(self, name: str, fn: Callable[[], str]) -> None:
        try:
            self.step(name, fn)
        except Exception as exc:
            self.warn(f"{name} failed: {exc}")

    # -- convergence -----------------------------------------------------------------------
    def _converge(self) -> CutoverResult:
        """PORT is already routed: check it serves, make nginx really route there, retire leftovers, and
        write the record an interrupted cutover to PORT did not (the state file still names another port)."""
        r = self.result
        before = state.load(self.state_dir)
        self.step("gate", self._gate)
        try:
            self.step("verify", self._verify)
        except CutoverFailed:
            # the include names PORT but nginx did not load it (killed before reload): reload now
            self.step("switch", self._reload)
            self.step("verify", self._verify)
        leftovers = [
            i.port
            for i in self.cfg.instances
            if i.port != self.target and self.host.unit_state(i.port) in ("active", "activating", "reloading")
        ]
        for port in leftovers:
            self.retire(port)
        # killed after the switch but before its record (e.g. while stopping the old instance, which then
        # stopped anyway): no leftover is running, and only the state file still knows where traffic came from
        interrupted = before.active_port not in (None, self.target)
        retired = leftovers[0] if leftovers else (before.active_port if interrupted else None)
        reloaded = any(s.name == "switch" for s in r.steps)
        r.outcome = Outcome.CONVERGED if retired is not None or reloaded else Outcome.ALREADY_ACTIVE
        r.ok, r.traffic = True, self.target
        if r.outcome == Outcome.CONVERGED:
            r.source = retired if retired is not None else (before.previous_port if before.active_port == self.target else r.source)
            self.follow_at_boot(retired)
            self.record()
        return r

    def _reload(self) -> str:
        self.host.reload()
        return "upstream already names the target; nginx -t ok, reloaded"


def rollback(cfg: Config, **kwargs: object) -> CutoverResult:
    """Back to the previous instance (from the state file, else the one other running instance); during a
    canary or bake window: its abort (back to the instance it started from)."""
    if rollout_file.load(Path(cfg.paths.state_dir)) is not None:
        return end_rollout(cfg, "abort", kind="rollback", **kwargs)
    host = kwargs.get("host")
    active = host.active_port() if host is not None else RealHost(cfg).active_port()
    previous = state.load(Path(cfg.paths.state_dir)).previous_port
    if previous is None or previous == active:
        others = [i.port for i in cfg.instances if i.port != active]
        if len(others) != 1:
            raise UsageError(f"no previous port recorded and {len(others)} candidates {others}; name one: ernie-ops cutover PORT")
        previous = others[0]
    return Cutover(cfg, previous, kind="rollback", **kwargs).run()


def end_rollout(cfg: Config, action: str, wait_seconds: float = 300.0, **kwargs: object) -> CutoverResult:
    """`--promote` / `--abort`: end the canary or bake window in progress. Its watcher, if alive, is asked (it acts
    at its next evaluation) and this waits for the outcome; with no watcher (killed), this process ends it."""
    state_dir = Path(cfg.paths.state_dir)
    pending = rollout_file.load(state_dir)
    if pending is None:
        raise UsageError(f"no canary or bake window is in progress: nothing to {action}")
    try:
        return Cutover(cfg, pending.target, action=action, **kwargs).run()
    except state.LockHeld:
        if not pending.watcher_alive():
            raise
    rollout_file.request(state_dir, action)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline and rollout_file.load(state_dir) is not None:
        time.sleep(0.2)
    if rollout_file.load(state_dir) is not None:
        raise CutoverFailed(
            f"the cutover watching the rollout (pid {pending.pid}) did not act on --{action} within {wait_seconds:.0f}s; "
            "check `ernie-ops status`"
        )
    last = state.load(state_dir).history[-1]
    done = CutoverResult(target=pending.target, source=pending.source, outcome=Outcome.recorded(last.get("outcome")))
    done.ok = done.outcome == (Outcome.PROMOTED if action == "promote" else Outcome.ROLLED_BACK)
    done.error = None if done.ok else last.get("error")
    done.traffic = pending.target if done.outcome == Outcome.PROMOTED else pending.source
    return done
