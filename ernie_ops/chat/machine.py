"""A small declarative state machine: states and transitions are data, `fire` is the only mover.

Session states (idle / collecting_info / generating) kept as strings set from anywhere in the
handlers drift; here every allowed move is listed once, so a scenario cannot reach a state by a
path nobody wrote down, and a forbidden event (a second message while generating) is an error the
app turns into a polite answer instead of a corrupted session.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ernie_ops.errors import ErnieOpsError


class InvalidTransition(ErnieOpsError):
    """`event` is not allowed in the current state."""

    def __init__(self, state: str, event: str, allowed: list[str]):
        self.state, self.event, self.allowed = state, event, allowed
        super().__init__(f"event '{event}' is not allowed in state '{state}' (allowed: {', '.join(allowed) or 'none'})")


@dataclass(frozen=True)
class Spec:
    """States, the initial one, and transitions {(state, event): next state}; '*' as state means any."""

    initial: str
    transitions: dict[tuple[str, str], str]
    states: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        states = {self.initial} | {s for s, _ in self.transitions if s != "*"} | set(self.transitions.values())
        object.__setattr__(self, "states", frozenset(states))

    def target(self, state: str, event: str) -> str | None:
        return self.transitions.get((state, event), self.transitions.get(("*", event)))

    def events(self, state: str) -> list[str]:
        return sorted({e for s, e in self.transitions if s in (state, "*")})


# The session machine every scenario shares: a new state or move is added here, nowhere else.
SESSION = Spec(
    initial="idle",
    transitions={
        ("idle", "ask"): "collecting_info",  # a scenario needs fields the user has not given yet
        ("idle", "generate"): "generating",  # everything known: send to the model
        ("collecting_info", "ask"): "collecting_info",  # still missing something: ask again
        ("collecting_info", "generate"): "generating",  # the last field arrived
        ("generating", "done"): "idle",
        ("generating", "stopped"): "idle",  # the stop button
        ("generating", "failed"): "idle",  # backend down, 5xx, broken stream: the user may just retry
    },
)


class Machine:
    """One session's current state; keeps the path it took (for logs and tests)."""

    def __init__(self, spec: Spec = SESSION):
        self.spec = spec
        self.state = spec.initial
        self.path: list[tuple[str, str, str]] = []

    def fire(self, event: str) -> str:
        target = self.spec.target(self.state, event)
        if target is None:
            raise InvalidTransition(self.state, event, self.spec.events(self.state))
        self.path.append((self.state, event, target))
        self.state = target
        return target
