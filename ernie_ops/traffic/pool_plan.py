"""The plan of a pool upgrade: which replica is replaced how, in which order, and what the host keeps serving
meanwhile (docs/design/replica-pool.md, step 5).

Slot by slot, in slot order. A **surge** where the slot has a second port and the device has room for two: the new
version starts there beside the old one, so the pool keeps all N replicas serving. **In place** otherwise (a slot of
one port, CPU cores, a card without room for two): the replica leaves rotation and restarts on the new version on
its own port, so N-1 of N serve during that step. Pure: the config, the replicas serving now and the rule for "side
by side" in; the steps out. The executor drives the cutover's verbs per step and prints this plan first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ernie_ops.config import Config
from ernie_ops.serving import engine
from ernie_ops.traffic.hostops import memory_budget_problem

CPU_SIDE_BY_SIDE = "two instances on one set of cores: the second does not become ready beside the first (measured)"


@dataclass(frozen=True)
class ReplicaStep:
    slot: int
    device: str
    old: int  # the port serving now
    new: int  # where the new version serves: the slot's surge port, or `old` again (in place)
    serving: int  # replicas in rotation during the step
    size: int  # the pool's replicas
    why_in_place: str = ""  # empty for a surge

    @property
    def surge(self) -> bool:
        return self.new != self.old

    def describe(self) -> str:
        if self.surge:
            how = f"surge: {self.new} starts beside {self.old}, takes its place, {self.old} drains and stops"
        else:
            how = f"in place: {self.old} leaves rotation, drains, restarts on the new version, rejoins ({self.why_in_place})"
        return f"slot {self.slot} ({self.device}): {how}; {self.serving} of {self.size} replicas serve meanwhile"


def side_by_side_problem(cfg: Config) -> Callable[[int, int], str | None]:
    """Why the new version cannot start beside the old one of a slot (None: it can): on CPU cores never; on a GPU
    when the two instances' memory shares exceed the card's budget (`hostops.memory_budget_problem`)."""
    if engine.resolve_accelerator(cfg.vllm.accelerator) != "gpu":
        return lambda old, new: CPU_SIDE_BY_SIDE
    return lambda old, new: memory_budget_problem(cfg, old, new)


def plan(cfg: Config, replicas: list[int], problem: Callable[[int, int], str | None]) -> list[ReplicaStep]:
    """One step per slot, in slot order; `replicas`: the port serving in each slot now (`pool_route.replicas`)."""
    slots = cfg.slots()
    if len(replicas) != len(slots):
        raise ValueError(f"{len(replicas)} replicas for {len(slots)} slots")
    size, steps = len(slots), []
    for slot, old in zip(slots, replicas, strict=True):
        spare = next((p for p in slot.ports if p != old), None)
        why = "the slot has no second port" if spare is None else problem(old, spare)
        if spare is not None and not why:
            steps.append(ReplicaStep(slot.index, slot.device(), old, spare, size, size))
        else:
            steps.append(ReplicaStep(slot.index, slot.device(), old, old, size - 1, size, why or ""))
    return steps


def capacity(steps: list[ReplicaStep]) -> str:
    """The least the pool keeps serving during the upgrade, in words."""
    if not steps:
        return "nothing to replace"
    low = min(s.serving for s in steps)
    return f"at least {low} of {steps[0].size} replicas serve at every step"
