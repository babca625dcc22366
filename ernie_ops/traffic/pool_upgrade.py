"""Replace a pool's replicas one at a time (docs/design/replica-pool.md, step 5): the executor of `pool_plan`.

Per step, in slot order:
  surge     start the new version on the slot's second port (or adopt it), gate it, put it in the old one's place
            in the include (one rewrite: nginx -t, reload), drain the old one (bounded), stop it; the new port
            starts at boot, the old one not.
  in place  take the replica out of rotation (its line marked `down`), drain it, stop it, start it again (the new
            version: its files changed), gate it, put it back.
Every step first stops the watch's and a cutover's hands (the state lock, held for the whole upgrade).
With a canary configured (`cutover.canary_steps` or `bake_seconds`), each new replica in rotation is judged against
the replicas still on the old version (`SloGate`, canary/replica_gate.py) before its old one drains: the pool's
canary steps are its replicas.

Undo, per step: a surge that fails before its rewrite stops the new instance (the old one never stopped serving);
a refused rewrite leaves the include as it was (the gateway restores it) and stops the new one; a new replica that
fails the SLO gate gives its place back to the old one (still warm: it drains only after the gate) and stops. An
in-place step that fails after its stop cannot bring the old version back (its files are the new version's): the
replica is *held* out of rotation (`down` with its reason in the include, which the watch never undoes however well
it answers /health), the others serve, and the error says so with what to do. Steps after a failed one do not run.
A rerun converges: the caller plans the replicas still on old inputs and the held ones (`apply`).

Everything done to the host goes through `PoolOps` (RealHost: hostops.RealHost plus the pool's include), so every
undo path is unit-tested against tests/harness/pool_host.py in milliseconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

from ernie_ops.config import EvalGateConfig
from ernie_ops.errors import ErnieOpsError
from ernie_ops.evaluate import gate as quality
from ernie_ops.traffic.canary import slo
from ernie_ops.traffic.pool_plan import ReplicaStep
from ernie_ops.traffic.runbook import Idle, Step, Timeouts

if TYPE_CHECKING:  # annotations only
    from ernie_ops.evaluate.run import EvalReport


class PoolOps(Protocol):
    def unit_state(self, port: int) -> str: ...

    def start(self, port: int, timeout: float) -> None:
        """Blocks until READY; raises the unit's own reason (systemd.StartFailed)."""

    def stop(self, port: int, timeout: float) -> None: ...

    def set_enabled(self, port: int, enabled: bool) -> None: ...

    def gate(self, port: int) -> object:
        """/health, /v1/models, a completion; raises ProbeFailed."""

    def in_flight(self, port: int) -> float | None:
        """Requests running or waiting on `port` (vLLM's /metrics); None when it does not answer."""

    def route_pool(self, ports: list[int], down: frozenset[int], held: dict[int, str]) -> None:
        """The include: every port a server, `down` ones out of rotation, `held` ones out with their reason (write,
        nginx -t, reload; restored on failure)."""

    def evaluate(self, path: str, port: int) -> EvalReport:
        """The golden set at `path` against the instance on `port` (the quality gate)."""

    def note_replica(self, port: int, slot: int | None) -> None:
        """The state file: `port` serves the new version in `slot` (None: it was stopped)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SloGate(Protocol):
    def judge(self, new: int, baseline: list[int]) -> slo.Verdict:
        """`new`'s SLO verdict over its own window, against the `baseline` replicas (none: absolute limits only)."""

    def bake(self, ports: list[int], seconds: float) -> slo.Verdict:
        """The new replicas together over `seconds`, against the absolute limits."""


@dataclass
class PoolResult:
    ok: bool = False
    replicas: list[int] = field(default_factory=list)  # the port serving in each slot at the end
    down: list[int] = field(default_factory=list)  # out of rotation at the end: the watch's marks, a failed in-place step's replica
    held: dict[int, str] = field(default_factory=dict)  # of those, the ones a failed gate holds out, with the reason
    steps: list[Step] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class StepFailed(ErnieOpsError):
    """A replica's step failed; the message says what was undone and where traffic is."""


class PoolUpgrade:
    def __init__(
        self,
        host: PoolOps,
        replicas: list[int],
        steps: list[ReplicaStep],
        timeouts: Timeouts | None = None,
        on_step: Callable[[Step], None] | None = None,
        down: frozenset[int] = frozenset(),
        eval_gate: EvalGateConfig | None = None,
        slo_gate: SloGate | None = None,
        held: dict[int, str] | None = None,
        bake_seconds: float = 0.0,
    ):
        self.host, self.t = host, timeouts or Timeouts()
        self.replicas = list(replicas)  # the port serving in each slot, updated as steps land
        self.steps = steps
        self.down: set[int] = set(down)  # out of rotation: the watch's marks when it started, then the in-place steps
        self.on_step = on_step or (lambda step: None)
        self.eval_gate = eval_gate if eval_gate is not None and eval_gate.file else None  # the first new replica's
        self.judged = False  # the quality gate has passed once: later replicas are not asked again
        self.slo_gate = slo_gate
        self.held: dict[int, str] = dict(held or {})  # held out by an earlier run's failed gate (also in `down`)
        self.down |= set(self.held)
        self.upgraded: set[int] = set()  # replicas on the new version: never another's SLO baseline
        self.bake_seconds = bake_seconds if slo_gate is not None else 0.0
        self.warm: list[ReplicaStep] = []  # surges whose old replica stays loaded (out of rotation) until the bake passed
        self.result = PoolResult(replicas=self.replicas)

    def run(self) -> PoolResult:
        try:
            try:
                for step in self.steps:
                    (self._surge if step.surge else self._in_place)(step)
                if self.bake_seconds > 0 and self.upgraded:
                    self._do(f"pool: bake {self.bake_seconds:g} s", self._bake)
            except ErnieOpsError as exc:
                raise StepFailed(f"{exc}{self._roll_back_warm()}") from None
            for s in self.warm:  # the bake passed: only now do the old replicas go
                self._retire(f"slot {s.slot} ({s.device})", s)
            self.result.ok = True
        except ErnieOpsError as exc:
            self.result.error = str(exc)
        self.result.replicas, self.result.down = list(self.replicas), sorted(self.down)
        self.result.held = dict(self.held)
        return self.result

    # -- steps --------------------------------------------------------------------------------
    def _surge(self, s: ReplicaStep) -> None:
        where = f"slot {s.slot} ({s.device})"
        try:
            self._do(f"{where}: start {s.new}", lambda: self._start(s.new))
            self._do(f"{where}: gate {s.new}", lambda: self._gate(s.new))
            self._note(s.new, s.slot)
            if self._quality_pending():
                self._do(f"{where}: quality {s.new}", lambda: self._quality(s.new, s.old))
            self._do(f"{where}: {s.new} in place of {s.old}", lambda: self._route(s.old, s.new))
        except ErnieOpsError as exc:
            self._undo(f"{where}: undo: stop {s.new}", lambda: self._stop(s.new))
            raise StepFailed(f"{where}: {exc}; {s.new} stopped, {s.old} kept serving; {self._left()}") from None
        self.upgraded.add(s.new)
        if self.slo_gate is not None:
            try:
                self._do(f"{where}: SLO {s.new}", lambda: self._slo(s.new))
            except ErnieOpsError as exc:
                self._give_back(where, s, str(exc))
        if self.bake_seconds > 0:
            self.warm.append(s)  # its old replica stays loaded: a failed bake puts it back at once
            return
        self._retire(where, s)

    def _retire(self, where: str, s: ReplicaStep) -> None:
        self._do(f"{where}: drain {s.old}", lambda: self._drain(s.old))
        self._do(f"{where}: stop {s.old}", lambda: self._stop(s.old))
        self._do(f"{where}: {s.new} at boot", lambda: self._boot(s.new, s.old))

    def _bake(self) -> str:
        gate = self.slo_gate
        assert gate is not None
        ports = [p for p in self.replicas if p in self.upgraded and p not in self.down]
        v = gate.bake(ports, self.bake_seconds)
        if v.result == slo.PASS:
            return f"pass: {v.reason}"
        outcome = "failed" if v.result == slo.FAIL else "could not be judged"
        raise StepFailed(f"the pool's bake ({', '.join(map(str, ports))}) {outcome}: {v.reason}")

    def _roll_back_warm(self) -> str:
        """After a failure: every surge whose old replica is still loaded goes back to it (last first); what is said of
        it, appended to the error. In-place replicas cannot go back (their files are the new version's)."""
        back, stuck = [], []
        for s in reversed(self.warm):
            where = f"slot {s.slot} ({s.device})"
            try:
                self._do(f"{where}: rollback: {s.old} back in place of {s.new}", lambda s=s: self._route(s.new, s.old))
            except ErnieOpsError:
                stuck.append(s.new)
                continue
            self.upgraded.discard(s.new)
            self._undo(f"{where}: rollback: stop {s.new}", lambda s=s: self._stop(s.new))
            back.append(s.old)
        self.warm = []
        said = f"; rolled back to the old version on {', '.join(map(str, back))} (loaded all along)" if back else ""
        if stuck:
            said += f"; {', '.join(map(str, stuck))} could not be rolled back (nginx refused) and still serve"
        kept = [p for p in self.replicas if p in self.upgraded and p not in stuck]
        if kept:
            said += (
                f"; {', '.join(map(str, kept))} stay on the new version (replaced in place: the old one cannot come back on "
                "them; put the previous version back with upgrade.yml, or fix the cause and run `ernie-ops apply`)"
            )
        return said

    def _in_place(self, s: ReplicaStep) -> None:
        where, port = f"slot {s.slot} ({s.device})", s.old
        try:
            self._do(f"{where}: {port} out of rotation", lambda: self._rotation(port, out=True))
        except ErnieOpsError as exc:
            raise StepFailed(f"{where}: {exc}; nothing changed for {port}; {self._left()}") from None
        try:
            self._do(f"{where}: drain {port}", lambda: self._drain(port))
            self._do(f"{where}: restart {port}", lambda: self._restart(port))
            self._note(port, s.slot)
            self._do(f"{where}: gate {port}", lambda: self._gate(port))
            if self._quality_pending():  # judged against a replica still on the old version, if one serves
                old = next(iter(self._baseline(port)), None)
                self._do(f"{where}: quality {port}", lambda: self._quality(port, old))
        except ErnieOpsError as exc:
            self._hold(where, port, str(exc))
            raise StepFailed(f"{where}: {exc}; {port} stays out of rotation ({self._left()}): {self._fix()}") from None
        self.upgraded.add(port)
        try:
            self._do(f"{where}: {port} back in rotation", lambda: self._rotation(port, out=False))
        except ErnieOpsError as exc:
            raise StepFailed(f"{where}: {port} serves the new version but {exc}; it stays out of rotation ({self._left()})") from None
        if self.slo_gate is not None:
            try:
                self._do(f"{where}: SLO {port}", lambda: self._slo(port))
            except ErnieOpsError as exc:
                self._hold(where, port, str(exc))
                raise StepFailed(f"{where}: {exc}; {port} is held out of rotation ({self._left()}): {self._fix()}") from None

    def _give_back(self, where: str, s: ReplicaStep, why: str) -> None:
        """A surge's new replica failed the SLO gate: the old one (still warm, never drained) takes its place back, the
        new one stops. If nginx refuses that, both keep running and the new one keeps its place: nothing is stopped."""
        try:
            self._do(f"{where}: undo: {s.old} back in place of {s.new}", lambda: self._route(s.new, s.old))
        except ErnieOpsError as exc:
            raise StepFailed(f"{where}: {why}; then putting {s.old} back failed: {exc}; both run, {s.new} serves") from None
        self.upgraded.discard(s.new)
        self._undo(f"{where}: undo: stop {s.new}", lambda: self._stop(s.new))
        raise StepFailed(f"{where}: {why}; {s.old} back in rotation, {s.new} stopped; {self._left()}")

    def _fix(self) -> str:
        return (
            "its files are the new version's, so the old one cannot come back on it; fix the cause and run "
            "`ernie-ops apply` again (it replaces a held replica again), or put the previous version back (upgrade.yml "
            "with it) and run it"
        )

    # -- actions ------------------------------------------------------------------------------
    def _start(self, port: int) -> str:
        if self.host.unit_state(port) == "active":
            return f"adopted {port} (already serving)"
        self.host.start(port, self.t.start)
        return f"{port} READY"

    def _gate(self, port: int) -> str:
        self.host.gate(port)
        return f"{port} answers /health, /v1/models and a completion"

    def _quality_pending(self) -> bool:
        return self.eval_gate is not None and not self.judged

    def _quality(self, new: int, old: int | None) -> str:
        """The golden set against the first new replica before it gets traffic, and against an old one to compare."""
        gate = self.eval_gate
        assert gate is not None and gate.file is not None
        new_report = self.host.evaluate(gate.file, new)
        old_report = None
        if old is not None:
            try:
                old_report = self.host.evaluate(gate.file, old)
            except ErnieOpsError:
                old = None  # judged by min_pass_rate only: moving away from a broken old version must stay possible
        verdict = quality.judge(gate, new, new_report, old, old_report)
        if not verdict.ok:
            raise StepFailed(verdict.sentence)
        self.judged = True
        return verdict.sentence

    def _slo(self, port: int) -> str:
        gate = self.slo_gate
        assert gate is not None
        v = gate.judge(port, self._baseline(port))
        if v.result == slo.PASS:
            return f"pass: {v.reason}"
        if v.result == slo.FAIL:
            raise StepFailed(f"{port} failed the SLO gate: {v.reason}")
        raise StepFailed(f"{port} could not be judged by the SLO gate in time: {v.reason}")

    def _baseline(self, port: int) -> list[int]:
        """The replicas still on the old version and in rotation: what a new one is compared with."""
        return [p for p in self.replicas if p != port and p not in self.down and p not in self.upgraded]

    def _route(self, old: int, new: int) -> str:
        replicas = [new if p == old else p for p in self.replicas]
        held = {p: why for p, why in self.held.items() if p in replicas}
        self.host.route_pool(replicas, frozenset(self.down & set(replicas)), held)
        self.replicas[:], self.held = replicas, held
        return f"rotation: {', '.join(map(str, replicas))}"

    def _rotation(self, port: int, out: bool, held: str | None = None) -> str:
        down = (self.down | {port}) if out else (self.down - {port})
        holds = {p: why for p, why in self.held.items() if p != port} | ({port: held} if held else {})
        self.host.route_pool(list(self.replicas), frozenset(down), holds)
        self.down, self.held = set(down), holds
        return f"in rotation: {', '.join(str(p) for p in self.replicas if p not in self.down) or 'none'}"

    def _hold(self, where: str, port: int, why: str) -> None:
        """Out of rotation with the reason, so the watch does not put it back when its /health answers."""
        self._undo(f"{where}: hold {port} out of rotation", lambda: self._rotation(port, out=True, held=why))

    def _drain(self, port: int) -> str:
        t0, idle = self.host.monotonic(), Idle()
        while (now := self.host.monotonic()) - t0 < self.t.drain:
            left = self.host.in_flight(port)
            if left is None:
                return f"{port} does not answer /metrics (already gone)"
            if idle.settled(now, left):
                return f"{port} idle after {now - t0:.1f} s"
            self.host.sleep(0.5)
        return f"{port} still had requests after {self.t.drain:.0f} s; stopping it (vLLM's own drain covers the rest)"

    def _stop(self, port: int) -> str:
        self.host.stop(port, self.t.stop)
        self._note(port, None)
        return f"{port} stopped"

    def _restart(self, port: int) -> str:
        self.host.stop(port, self.t.stop)
        self.host.start(port, self.t.start)
        return f"{port} READY on the new version"

    def _boot(self, new: int, old: int) -> str:
        self.host.set_enabled(new, True)
        self.host.set_enabled(old, False)
        return f"{new} starts at boot, {old} not"

    # -- bookkeeping --------------------------------------------------------------------------
    def _note(self, port: int, slot: int | None) -> None:
        """The state file follows each step; one it cannot write is a failed step of its own, never the upgrade's end
        (the state file is history: the include and the units are the truth)."""
        try:
            self.host.note_replica(port, slot)
        except ErnieOpsError as exc:
            self._report(Step(f"state file: replica {port}", False, 0.0, str(exc)))

    def _do(self, name: str, fn: Callable[[], str]) -> None:
        t0 = time.monotonic()
        try:
            detail = fn()
        except ErnieOpsError as exc:
            self._report(Step(name, False, time.monotonic() - t0, str(exc)))
            raise
        self._report(Step(name, True, time.monotonic() - t0, detail))

    def _undo(self, name: str, fn: Callable[[], str]) -> None:
        """An undo that fails is reported, never raised over the failure it undoes."""
        with contextlib.suppress(ErnieOpsError):  # _do reported it
            self._do(name, fn)

    def _report(self, step: Step) -> None:
        self.result.steps.append(step)
        self.on_step(step)

    def _left(self) -> str:
        serving = [p for p in self.replicas if p not in self.down]
        return f"{len(serving)} of {len(self.replicas)} replicas serve: {', '.join(map(str, serving)) or 'none'}"
