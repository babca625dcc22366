"""A FAKE host for the cutover runbook (ernie_ops/traffic/hostops.py's `HostOps`): two ernie-vllm units and an
nginx in memory, with faults injected on demand (a refused reload, a unit that will not stop, a kill in the
middle) and its own clock, so the runbook's undo logic is tested in milliseconds. Shared by the runbook,
rollout, state and apply tests; the real host is covered by tests/integration/test_cutover_nginx.py and the
e2e fault matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ernie_ops import config
from ernie_ops.errors import ErnieOpsError, ProbeFailed
from ernie_ops.evaluate import run
from ernie_ops.serving import probe
from ernie_ops.stats import metrics
from ernie_ops.traffic import gateway

OLD, NEW = 8000, 8001
MUTATIONS = {"start", "stop", "enable", "disable", "switch", "restore", "reload"}


class Fault(ErnieOpsError):
    """What the fake host raises at the chosen operation."""


@dataclass
class FakeHost:
    """A host with two ernie-vllm units and an nginx: `file_port` is what upstream.conf names, `live_port`
    what nginx has loaded. `fail` names operations that fail; `kill` one that takes effect and then
    raises KeyboardInterrupt (the operator's kill arriving while it runs); `kill_before` one that is killed
    before it takes effect. `stuck_reload`: nginx accepts the reload but keeps the old upstream."""

    units: dict[int, str] = field(default_factory=lambda: {OLD: "active", NEW: "inactive"})
    enabled: dict[int, bool] = field(default_factory=lambda: {OLD: True, NEW: False})
    file_port: int | None = OLD
    live_port: int | None = OLD
    nginx_up: bool = True
    foreign: set[int] = field(default_factory=set)  # ports held by a process that is not their unit
    fail: set[str] = field(default_factory=set)
    kill: str | None = None
    kill_before: str | None = None
    stuck_reload: bool = False
    busy: set[int] = field(default_factory=set)  # ports whose requests never drain
    # the quality gate's scripted answers: per port, the cases (id, passed) of its report, or the exception it raises
    evals: dict[int, list[tuple[str, bool]] | Exception] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    now: float = 0.0

    def _call(self, name: str, *args: object) -> None:
        self.calls.append((name, *args))
        if self.kill_before == name:
            raise KeyboardInterrupt(name)
        if name in self.fail:
            raise Fault(f"injected: {name} {' '.join(map(str, args))}".strip())

    def _done(self, name: str) -> None:
        if self.kill == name:
            raise KeyboardInterrupt(name)

    def mutations(self) -> list[tuple]:
        return [c for c in self.calls if c[0] in MUTATIONS]

    # systemd
    def unit_state(self, port: int) -> str:
        self._call("unit_state", port)
        return self.units.get(port, "inactive")

    def start(self, port: int, timeout: float) -> None:
        self._call("start", port)
        self.units[port] = "active"
        self._done("start")

    def stop(self, port: int, timeout: float) -> None:
        self._call("stop", port)
        self.units[port] = "inactive"
        self._done("stop")

    def set_enabled(self, port: int, enabled: bool) -> None:
        self._call("enable" if enabled else "disable", port)
        self.enabled[port] = enabled
        self._done("enable" if enabled else "disable")

    # nginx
    def read_upstream(self) -> str:
        self._call("read_upstream")
        return gateway.render_upstream(self.file_port) if self.file_port else "# nothing routed\n"

    def active_port(self) -> int | None:
        self._call("active_port")
        return self.file_port

    def nginx_test(self) -> None:
        self._call("nginx_test")

    def nginx_problem(self) -> str | None:
        self._call("nginx_problem")
        return None if self.nginx_up else "nginx is not running (no master process for pid file /run/nginx.pid); nothing was changed"

    def port_problem(self, port: int) -> str | None:
        self._call("port_problem", port)
        return f"port {port} is held by another process (pid 4242 python)" if port in self.foreign else None

    def _load(self) -> None:
        if not self.stuck_reload:
            self.live_port = self.file_port

    def switch(self, port: int) -> None:
        self._call("switch", port)  # a failure leaves the previous file in place, like Gateway.switch
        self.file_port = port
        if self.kill == "switch":  # killed after writing the file, before the reload
            raise KeyboardInterrupt("switch")
        self._load()

    def restore(self, text: str) -> None:
        ports = gateway.parse_ports(text)
        self._call("restore", ports[0] if ports else None)
        self.file_port = ports[0] if ports else None
        self._load()

    def reload(self) -> None:
        self._call("reload")
        self._load()

    def gateway_health(self) -> tuple[int, str] | None:
        self._call("gateway_health")
        if not self.nginx_up:
            return None
        if self.live_port is None:
            return 503, ""
        return (200 if self.units.get(self.live_port) == "active" else 503), f"127.0.0.1:{self.live_port}"

    # instances
    def gate(self, port: int) -> probe.GateResult:
        self._call("gate", port)
        if self.units.get(port) != "active":
            raise ProbeFailed(f"http://127.0.0.1:{port}/health does not answer 200")
        return probe.GateResult(models=["ernie-tiny"], completion_text="!", finish_reason="length", seconds=0.01)

    def metrics(self, port: int) -> metrics.Snapshot | None:
        self._call("metrics", port)
        if self.units.get(port) != "active":
            return None
        running = 2.0 if port in self.busy else 0.0
        return metrics.Snapshot(running=running, waiting=0.0, kv_cache_usage=None, ttft_p50=None, ttft_p99=None, requests_ok=0.0)

    def memory_problem(self, source: int | None, target: int) -> str | None:
        self._call("memory_problem", source, target)
        return "only 1.0 GiB of memory is available; a second CPU instance needs about 3 GiB" if "memory" in self.fail else None

    def evaluate(self, path: str, port: int) -> run.EvalReport:
        self._call("evaluate", port)
        scripted = self.evals.get(port, [("capital-france", True)])
        if isinstance(scripted, Exception):
            raise scripted
        cases = [run.CaseResult(i, "messages", 1.0, ok, "", [] if ok else [f"missing 'answer-{i}'"]) for i, ok in scripted]
        return run.EvalReport(cases, 0.01, f"http://127.0.0.1:{port}")

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def make_cfg(tmp_path: Path) -> config.Config:
    return config.parse(f"gateway:\n  url: http://127.0.0.1:9\npaths:\n  state_dir: {tmp_path / 'state'}\n")
