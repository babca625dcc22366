"""A FAKE host for the pool upgrade (ernie_ops/traffic/pool_upgrade.py's `PoolOps`): ernie-vllm units and the
pool's include in memory, faults injected on demand, its own clock, so every undo path runs in milliseconds. The
real host is covered by the e2e tier (the fleet's pool host)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ernie_ops.errors import ErnieOpsError, ProbeFailed
from ernie_ops.evaluate import run
from ernie_ops.host.systemd import StartFailed
from ernie_ops.traffic.gateway import GatewayError


@dataclass
class FakePoolHost:
    """`units`: port -> ActiveState; `rotation`/`down`: what the include says; `fail`: ("start", PORT) and the like
    make that operation raise; `refuse_routes`: the n-th and later include rewrites are refused by nginx -t."""

    units: dict[int, str]
    rotation: list[int]
    down: frozenset[int] = frozenset()
    held: dict[int, str] = field(default_factory=dict)  # port -> why an upgrade holds it out (the include's `# held:`)
    enabled: dict[int, bool] = field(default_factory=dict)
    fail: set[tuple[str, int]] = field(default_factory=set)
    busy: set[int] = field(default_factory=set)  # ports whose requests never drain
    refuse_routes_from: int | None = None
    # the quality gate's scripted answers per port: the cases (id, passed) of its report (default: one passing case)
    evals: dict[int, list[tuple[str, bool]]] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    versions: dict[int, tuple[int, str]] = field(default_factory=dict)  # what the state file says: port -> (slot, version)
    routes: int = 0
    now: float = 0.0

    def _call(self, name: str, port: int) -> None:
        self.calls.append((name, port))
        if (name, port) in self.fail:
            if name == "start":
                raise StartFailed(f"ernie-vllm@{port}.service", "engine exited with code 1 while loading")
            if name == "gate":
                raise ProbeFailed(f"http://127.0.0.1:{port}/health does not answer 200")
            raise ErnieOpsError(f"injected: {name} {port}")

    def unit_state(self, port: int) -> str:
        return self.units.get(port, "inactive")

    def start(self, port: int, timeout: float) -> None:
        self._call("start", port)
        self.units[port] = "active"

    def stop(self, port: int, timeout: float) -> None:
        self._call("stop", port)
        self.units[port] = "inactive"

    def set_enabled(self, port: int, enabled: bool) -> None:
        self.calls.append(("enable" if enabled else "disable", port))
        self.enabled[port] = enabled

    def gate(self, port: int) -> object:
        self._call("gate", port)
        if self.units.get(port) != "active":
            raise ProbeFailed(f"http://127.0.0.1:{port}/health does not answer 200")
        return object()

    def in_flight(self, port: int) -> float | None:
        if self.units.get(port) != "active":
            return None
        return 2.0 if port in self.busy else 0.0

    def route_pool(self, ports: list[int], down: frozenset[int], held: dict[int, str]) -> None:
        self.routes += 1
        self.calls.append(("route", tuple(ports), tuple(sorted(down))))
        if self.refuse_routes_from is not None and self.routes >= self.refuse_routes_from:
            raise GatewayError("nginx -t failed: unknown directive")  # the include left as it was
        self.rotation, self.down, self.held = list(ports), frozenset(down) | frozenset(held), dict(held)

    def evaluate(self, path: str, port: int) -> run.EvalReport:
        self._call("evaluate", port)
        cases = [
            run.CaseResult(i, "messages", 1.0, ok, "", [] if ok else [f"missing 'answer-{i}'"])
            for i, ok in self.evals.get(port, [("hello", True)])
        ]
        return run.EvalReport(cases, 0.01, f"http://127.0.0.1:{port}")

    def note_replica(self, port: int, slot: int | None) -> None:
        if slot is None:
            self.versions.pop(port, None)
        else:
            self.versions[port] = (slot, "new")

    def in_rotation(self) -> list[int]:
        return [p for p in self.rotation if p not in self.down]

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
