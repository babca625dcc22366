"""Replace a pool's replicas one at a time (docs/design/replica-pool.md, step 5): the executor of `pool_plan`.

Per step, in slot order:
  surge     start the new version on the slot's second port (or adopt it), gate it, put it in the old one's place
            in the include (one rewrite: nginx -t, reload), drain the old one (bounded), stop it; the new port
            starts at boot, the old one not.
  in place  take the replica out of rotation (its line marked `down`), drain it, stop it, start it again (the new
            version: its files changed), gate it, put it back.
Every step first stops the watch's and a cutover's hands (the state lock, held for the whole upgrade).

Undo, per step: a surge that fails before its rewrite stops the new instance (the old one never stopped serving);
a refused rewrite leaves the include as it was (the gateway restores it) and stops the new one. An in-place step
that fails after its stop cannot bring the old version back (its files are the new version's): the replica stays out
of rotation, the others serve, and the error says so with what to do. Steps after a failed one do not run. A rerun
converges: the caller plans only the replicas still on old inputs (`apply`).

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
from ernie_ops.traffic.pool_plan import ReplicaStep
from ernie_ops.traffic.runbook import Step

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

    def route_pool(self, ports: list[int], down: frozenset[int]) -> None:
        """The include: every port a server, `down` ones out of rotation (write, nginx -t, reload; restored on failure)."""

    def evaluate(self, path: str, port: int) -> EvalReport:
        """The golden set at `path` against the instance on `port` (the quality gate)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass
class Timeouts:
    start: float = 900.0
    drain: float = 120.0
    stop: float = 120.0


@dataclass
class PoolResult:
    ok: bool = False
    replicas: list[int] = field(default_factory=list)  # the port serving in each slot at the end
    down: list[int] = field(default_factory=list)  # out of rotation at the end: the watch's marks, a failed in-place step's replica
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
    ):
        self.host, self.t = host, timeouts or Timeouts()
        self.replicas = list(replicas)  # the port serving in each slot, updated as steps land
        self.steps = steps
        self.down: set[int] = set(down)  # out of rotation: the watch's marks when it started, then the in-place steps
        self.on_step = on_step or (lambda step: None)
        self.eval_gate = eval_gate if eval_gate is not None and eval_gate.file else None  # the first new replica's
        self.judged = False  # the quality gate has passed once: later replicas are not asked again
        self.result = PoolResult(replicas=self.replicas)

    def run(self) -> PoolResult:
        try:
            for step in self.steps:
                (self._surge if step.surge else self._in_place)(step)
            self.result.ok = True
        except ErnieOpsError as exc:
            self.result.error = str(exc)
        self.result.replicas, self.result.down = list(self.replicas), sorted(self.down)
        return self.result

    # -- steps --------------------------------------------------------------------------------
    def _surge(self, s: ReplicaStep) -> None:
        where = f"slot {s.slot} ({s.device})"
        try:
            self._do(f"{where}: start {s.new}", lambda: self._start(s.new))
            self._do(f"{where}: gate {s.new}", lambda: self._gate(s.new))
            if self._quality_pending():
                self._do(f"{where}: quality {s.new}", lambda: self._quality(s.new, s.old))
            self._do(f"{where}: {s.new} in place of {s.old}", lambda: self._route(s.old, s.new))
        except ErnieOpsError as exc:
            self._undo(f"{where}: undo: stop {s.new}", lambda: self._stop(s.new))
            raise StepFailed(f"{where}: {exc}; {s.new} stopped, {s.old} kept serving; {self._left()}") from None
        self._do(f"{where}: drain {s.old}", lambda: self._drain(s.old))
        self._do(f"{where}: stop {s.old}", lambda: self._stop(s.old))
        self._do(f"{where}: {s.new} at boot", lambda: self._boot(s.new, s.old))

    def _in_place(self, s: ReplicaStep) -> None:
        where, port = f"slot {s.slot} ({s.device})", s.old
        try:
            self._do(f"{where}: {port} out of rotation", lambda: self._rotation(port, out=True))
        except ErnieOpsError as exc:
            raise StepFailed(f"{where}: {exc}; nothing changed for {port}; {self._left()}") from None
        try:
            self._do(f"{where}: drain {port}", lambda: self._drain(port))
            self._do(f"{where}: restart {port}", lambda: self._restart(port))
            self._do(f"{where}: gate {port}", lambda: self._gate(port))
            if self._quality_pending():  # judged against a replica still on the old version, if one serves
                old = next((p for p in self.replicas if p != port and p not in self.down), None)
                self._do(f"{where}: quality {port}", lambda: self._quality(port, old))
        except ErnieOpsError as exc:
            raise StepFailed(
                f"{where}: {exc}; {port} stays out of rotation ({self._left()}): its files are the new version's, so the old "
                f"one cannot come back on it; fix the cause and run `ernie-ops apply` again, or put the previous version "
                "back (upgrade.yml with it) and run it"
            ) from None
        try:
            self._do(f"{where}: {port} back in rotation", lambda: self._rotation(port, out=False))
        except ErnieOpsError as exc:
            raise StepFailed(f"{where}: {port} serves the new version but {exc}; it stays out of rotation ({self._left()})") from None

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

    def _route(self, old: int, new: int) -> str:
        replicas = [new if p == old else p for p in self.replicas]
        self.host.route_pool(replicas, frozenset(self.down))
        self.replicas[:] = replicas
        return f"rotation: {', '.join(map(str, replicas))}"

    def _rotation(self, port: int, out: bool) -> str:
        down = (self.down | {port}) if out else (self.down - {port})
        self.host.route_pool(list(self.replicas), frozenset(down))
        self.down = set(down)
        return f"in rotation: {', '.join(str(p) for p in self.replicas if p not in self.down) or 'none'}"

    def _drain(self, port: int) -> str:
        t0 = self.host.monotonic()
        while self.host.monotonic() - t0 < self.t.drain:
            left = self.host.in_flight(port)
            if not left:
                return f"{port} idle after {self.host.monotonic() - t0:.1f} s"
            self.host.sleep(0.5)
        return f"{port} still had requests after {self.t.drain:.0f} s; stopping it (vLLM's own drain covers the rest)"

    def _stop(self, port: int) -> str:
        self.host.stop(port, self.t.stop)
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
