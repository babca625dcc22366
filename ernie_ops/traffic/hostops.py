"""What the cutover runbook does to the host, behind one small interface (`HostOps`), so the runbook's
undo logic is unit-tested against a fake host in milliseconds and runs on the real one via `RealHost`.

RealHost wires today's modules: systemd (ernie-vllm@PORT), the gateway (nginx), the probe gate, one
request through the gateway, vLLM's /metrics, the memory budget, a golden set run against one instance
(the quality gate), and the clock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx

from ernie_ops.client.headers import UPSTREAM_HEADER
from ernie_ops.config import GPU_BUDGET, Config
from ernie_ops.errors import ErnieOpsError
from ernie_ops.host import ports, state, systemd
from ernie_ops.serving import engine, probe
from ernie_ops.stats import metrics
from ernie_ops.traffic.gateway import Gateway

if TYPE_CHECKING:  # annotations only: RealHost imports the eval pipelines when a gate runs
    from ernie_ops.evaluate.run import EvalReport


class HostOps(Protocol):
    # systemd: ernie-vllm@PORT
    def unit_state(self, port: int) -> str:
        """The unit's ActiveState: active, activating, inactive, failed, deactivating, ..."""

    def start(self, port: int, timeout: float) -> None:
        """Blocks until READY; raises when the unit fails (systemd.StartFailed: the launcher's reason, the journal command)."""

    def stop(self, port: int, timeout: float) -> None: ...

    def set_enabled(self, port: int, enabled: bool) -> None: ...

    # the gateway (nginx)
    def read_upstream(self) -> str: ...

    def active_port(self) -> int | None: ...

    def nginx_test(self) -> None:
        """`nginx -t` of the config on disk; raises with nginx's message."""

    def nginx_problem(self) -> str | None:
        """None when nginx's master runs, else why not and what to do."""

    def port_problem(self, port: int) -> str | None:
        """None unless `port` is held by a process that is not its (inactive) unit."""

    def switch(self, port: int) -> None:
        """Route to `port` (write, -t, reload); on failure the previous upstream is back on disk."""

    def split(self, source: int, target: int, percent: int, sticky: str) -> None:
        """A canary step: `percent` of requests to `target` (write, -t, reload); on failure the previous upstream is back."""

    def restore(self, text: str) -> None:
        """Put a previous upstream back and reload."""

    def reload(self) -> None:
        """What is on disk goes live: -t, then a graceful reload."""

    def gateway_health(self) -> tuple[int, str] | None:
        """One GET /health through the gateway: (status, upstream header), None when it does not answer."""

    # instances
    def gate(self, port: int) -> probe.GateResult:
        """/health, /v1/models, a completion; raises ProbeFailed."""

    def metrics(self, port: int) -> metrics.Snapshot | None:
        """vLLM's /metrics; None when the instance does not answer."""

    def memory_problem(self, source: int | None, target: int) -> str | None:
        """Why source and target cannot run side by side; None if they can."""

    def evaluate(self, path: str, port: int) -> EvalReport:
        """The golden set at `path` against the instance on `port`; raises TargetDown when it cannot be reached,
        GoldenSetError for a bad set."""

    # time
    def monotonic(self) -> float: ...

    def wall(self) -> float:
        """Seconds since the epoch: a bake window's end outlives the process that set it."""

    def sleep(self, seconds: float) -> None: ...


def memory_budget_problem(cfg: Config, source: int | None, target: int, meminfo: Path = Path("/proc/meminfo")) -> str | None:
    """Why old and new cannot run side by side, with the numbers and what to change; None if they can."""
    if source is None:
        return None
    accel = engine.resolve_accelerator(cfg.vllm.accelerator)
    if accel == "gpu":
        src, dst = cfg.instance(source), cfg.instance(target)
        if src.gpu is not None and dst.gpu is not None and src.gpu != dst.gpu:
            return None
        util = cfg.vllm.gpu_memory_utilization
        if 2 * util <= GPU_BUDGET:
            return None
        gpu = "the same GPU" if src.gpu == dst.gpu else "all visible GPUs (instances[].gpu unset)"
        return (
            f"{source} and {target} would share {gpu}, each with vllm.gpu_memory_utilization {util}: side by side they need "
            f"{2 * util:.2f} of it (limit {GPU_BUDGET}). Set vllm.gpu_memory_utilization <= {GPU_BUDGET / 2:.2f}, "
            f"or put instance {target} on another GPU (instances[].gpu)."
        )
    need_gib = cfg.vllm.cpu_kvcache_space_gib + 2  # KV cache + ~2 GiB of weights/runtime for this model
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
        avail_gib = int(fields["MemAvailable"].split()[0]) / 1024 / 1024
    except (OSError, KeyError, ValueError):
        return None
    if avail_gib < need_gib:
        return (
            f"only {avail_gib:.1f} GiB of memory is available; a second CPU instance needs about {need_gib} GiB "
            f"(vllm.cpu_kvcache_space_gib {cfg.vllm.cpu_kvcache_space_gib} + 2). Lower cpu_kvcache_space_gib or free memory."
        )
    return None


class RealHost:
    """The host as it is: systemctl, nginx, HTTP to the instances and the gateway, /proc/meminfo, real time."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.gw = Gateway(cfg.gateway, cfg.pool.session_affinity)
        self._client: httpx.Client | None = None

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=5, verify=self.cfg.gateway.tls_verify())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def unit_state(self, port: int) -> str:
        return systemd.state(port).active

    def start(self, port: int, timeout: float) -> None:
        systemd.start(port, timeout=timeout)

    def stop(self, port: int, timeout: float) -> None:
        systemd.stop(port, timeout=timeout)

    def set_enabled(self, port: int, enabled: bool) -> None:
        systemd.set_enabled(port, enabled)

    def read_upstream(self) -> str:
        return self.gw.read_upstream()

    def active_port(self) -> int | None:
        return self.gw.active_port()

    def nginx_test(self) -> None:
        self.gw.test()

    def nginx_problem(self) -> str | None:
        return self.gw.master_problem()

    def port_problem(self, port: int) -> str | None:
        try:
            unit = self.unit_state(port)
        except ErnieOpsError:
            return None  # systemd cannot be asked: the start step says so itself
        h = ports.foreign_holder(port, unit)
        if h is None:
            return None
        return (
            f"port {port} is held by another process ({h.describe()}) while {systemd.unit_name(port)} is not running; "
            "stop that process first: the new instance could not bind it, and the gate would judge the wrong server"
        )

    def switch(self, port: int) -> None:
        self.gw.switch(port)

    def split(self, source: int, target: int, percent: int, sticky: str) -> None:
        self.gw.split(source, target, percent, sticky)

    def restore(self, text: str) -> None:
        self.gw.restore(text)

    def reload(self) -> None:
        self.gw.apply()

    def gateway_health(self) -> tuple[int, str] | None:
        try:
            resp = self._http().get(f"{self.cfg.gateway.url}/health")
        except httpx.HTTPError:
            return None
        return resp.status_code, resp.headers.get(UPSTREAM_HEADER, "")

    def gate(self, port: int) -> probe.GateResult:
        return probe.gate(probe.base_url(port), self.cfg.model.served_name, self.cfg.health)

    def metrics(self, port: int) -> metrics.Snapshot | None:
        try:
            return metrics.snapshot(probe.base_url(port), client=self._http())
        except httpx.HTTPError:
            return None

    # a pool's verbs (traffic/pool_upgrade.PoolOps)
    def in_flight(self, port: int) -> float | None:
        snap = self.metrics(port)
        return None if snap is None else snap.in_flight

    def route_pool(self, ports: list[int], down: frozenset[int], held: dict[int, str]) -> None:
        self.gw.route_pool(ports, self.cfg.pool.balance, down, held)

    def note_replica(self, port: int, slot: int | None) -> None:
        state.note_replica(Path(self.cfg.paths.state_dir), port, slot, engine.fingerprint(self.cfg) if slot is not None else "")

    def memory_problem(self, source: int | None, target: int) -> str | None:
        return memory_budget_problem(self.cfg, source, target)

    def evaluate(self, path: str, port: int) -> EvalReport:
        # lazy: the chat, docs and marketing pipelines a set runs through, only when a quality gate is configured
        from ernie_ops.evaluate import run

        return run.evaluate(path, run.Target.for_instance(self.cfg, port))

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
