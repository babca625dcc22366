"""A test load that runs only for the moments of a rollout that matter: while a host runs two instances.

From the new instance's READY to the old one's stop a cutover gates, switches, watches its canary and bake, and
drains: every request in flight then must survive, so a load must cover that window. Outside it (the new engine
loading, the other host's turn, the play's file tasks) a load proves nothing, yet each loaded engine spins a core
(vLLM's worker busy-polls for 1 s after every message), which slowed the starts beside it and the other test lane:
measured in tests/e2e/test_ansible.py's upgrade, the loads ran for all of its ~370 s.

`LoadWindows` polls each watched host (`systemctl is-active` of its two instance units) from the controller and
keeps gate files (`openai_loop.py --gate FILE`) present while the windows that open them are open, plus `linger`
seconds; it records each window for the test to print and to assert on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.harness import sandbox

UNITS = ("ernie-vllm@8000.service", "ernie-vllm@8001.service")


@dataclass
class Gate:
    """A gate file in `client`, open while any of `hosts` is in its window."""

    client: sandbox.Sandbox
    path: str
    hosts: frozenset[str]
    opened: bool = False
    until: float = 0.0  # open until then (the last moment a window was seen open, plus the linger)


@dataclass
class LoadWindows:
    watched: dict[str, sandbox.Sandbox]
    gates: list[Gate]
    every: float = 0.4  # a refused target's window (READY, the gate, the stop) lasts a few seconds; a poll costs ~25 ms of CPU
    linger: float = 2.0
    windows: dict[str, list[list[float]]] = field(default_factory=dict)  # host -> [[opened, closed], ...] (monotonic)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadWindows:
        for gate in self.gates:
            gate.client.run(["rm", "-f", gate.path])
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def seconds(self, host: str) -> float:
        """How long `host`'s windows were open in all."""
        now = time.monotonic()
        return sum((end or now) - start for start, end in self.windows.get(host, []))

    def summary(self) -> str:
        return ", ".join(f"{h}: {len(self.windows.get(h, []))} window(s), {self.seconds(h):.0f} s" for h in self.watched)

    def _in_window(self, sb: sandbox.Sandbox) -> bool:
        states = sb.run(["systemctl", "is-active", *UNITS], check=False, timeout=30).stdout.split()
        return states.count("active") == len(UNITS)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                open_now = {name for name, sb in self.watched.items() if self._in_window(sb)}
            except Exception as exc:  # a slow nsenter: counted, the gates keep their state until the next poll
                self.errors.append(repr(exc)[:300])
                open_now = None
            if open_now is not None:
                for name in self.watched:
                    spans = self.windows.setdefault(name, [])
                    if name in open_now and (not spans or spans[-1][1] is not None):
                        spans.append([now, None])
                    elif name not in open_now and spans and spans[-1][1] is None:
                        spans[-1][1] = now
                for gate in self.gates:
                    in_window = bool(gate.hosts & open_now)
                    if in_window:
                        gate.until = now + self.linger
                    want = in_window or now < gate.until
                    if want != gate.opened:
                        gate.client.run(["touch", gate.path] if want else ["rm", "-f", gate.path], check=False, timeout=30)
                        gate.opened = want
            self._stop.wait(self.every)
