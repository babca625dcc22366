"""What a cutover reports and the verbs the canary watch drives it by: shared by `cutover` (the runbook
that moves traffic) and `canary.rollout` (the watch between its gate and its switch), so neither imports
the other's insides and the watch does not import the runbook at all.

`Outcome` is a `str` enum: its values are the words printed by the CLI and written to state.json, the
JSON output and the cutover marks, unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only
    from ernie_ops.config import Config
    from ernie_ops.traffic.hostops import HostOps


# A drain ends once the old instance has had no request running or waiting for this long, not at the first idle
# reading: a request nginx handed it just before the include changed may still be in vLLM's API server (read,
# tokenised) where the engine's gauges do not count it yet, and stopped then it fails with a 500 (the e2e pool
# upgrade lost one so: "cannot schedule new futures after shutdown"). vLLM's /load would count it, but its counter
# leaks and goes negative on client disconnects (vllm-project/vllm#49526, open).
DRAIN_SETTLE_SECONDS = 1.0


@dataclass
class Timeouts:
    """Seconds each step may take: a new instance's start to READY, the gate's probes, a retired one's drain and stop
    (the cutover's, and each replica's in a pool upgrade)."""

    start: float = 900.0
    verify: float = 15.0
    drain: float = 120.0
    stop: float = 120.0


@dataclass
class Idle:
    """The drains' rule (the cutover's and the pool upgrade's): fed each reading of requests in flight, says when the
    instance has stayed idle for DRAIN_SETTLE_SECONDS."""

    since: float | None = None

    def settled(self, now: float, in_flight: float) -> bool:
        self.since = (self.since if self.since is not None else now) if in_flight == 0 else None
        return self.since is not None and now - self.since >= DRAIN_SETTLE_SECONDS


class Outcome(StrEnum):
    PENDING = "pending"  # the run has not ended
    SWITCHED = "switched"  # all traffic moved at once, verified
    ALREADY_ACTIVE = "already-active"  # the target was routed and serving: nothing changed
    CONVERGED = "converged"  # the target was routed: an interrupted cutover was finished
    DRY_RUN = "dry-run"  # preflight passed, nothing changed
    PROMOTED = "promoted"  # the watch passed (or --promote): all traffic on the target, the source retired
    ABORTED = "aborted"  # failed before the switch: the old instance never stopped serving
    ROLLED_BACK = "rolled-back"  # failed at or after the switch: traffic put back on the old instance
    ROLLBACK_FAILED = "rollback-failed"  # routing back failed: both instances left running
    UNKNOWN = "?"  # a history entry that names no outcome this version writes

    @classmethod
    def recorded(cls, value: object) -> Outcome:
        """The outcome a history entry in state.json names (UNKNOWN if none)."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class CutoverResult:
    target: int
    source: int | None
    outcome: Outcome = Outcome.PENDING
    ok: bool = False
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    traffic: int | None = None  # the instance that answered through the gateway at the end (None: none did)
    where: str = ""  # where traffic is, in words, on a failure (what the CLI prints after the error)

    def as_dict(self) -> dict:
        return asdict(self)

    def seconds(self, name: str) -> float:
        return sum(s.seconds for s in self.steps if s.name == name)


class Runbook(Protocol):
    """What the canary watch asks of the cutover that started it (`cutover.Cutover` is one)."""

    cfg: Config
    host: HostOps  # the watch reads its clock (wall, sleep) from it; traffic moves through the verbs below
    state_dir: Path
    result: CutoverResult

    def report(self, step: Step) -> None:
        """Record and show a step taken outside `step` (a decision of the watch)."""

    def warn(self, text: str) -> None:
        """A warning in the result: something went wrong that does not fail the run."""

    def split(self, source: int, target: int, percent: int, sticky: str) -> None:
        """`percent` of the traffic to `target`, the rest to `source` (nginx reloaded)."""

    def switch(self) -> None:
        """All traffic to the target, verified through the gateway (the steps switch and verify)."""

    def route_to(self, port: int) -> None:
        """All traffic to `port`, verified through the gateway; not a step (the caller records its decision)."""

    def retire(self, port: int) -> None:
        """Drain and stop an instance that no longer gets traffic; failures are warnings."""

    def follow_at_boot(self, source: int | None) -> None:
        """The target enabled at boot, `source` disabled; failures are warnings."""

    def serving_port(self) -> int | None:
        """The instance that answers through the gateway now; None if none does."""

    def where(self) -> str:
        """Where traffic is after a failure, in words (from the result's traffic, source and outcome)."""

    def record(self, extra: dict | None = None) -> None:
        """The result (and `extra`) to the history in state.json and the cutover marks."""
