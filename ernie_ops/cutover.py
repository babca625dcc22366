"""`ernie-ops cutover PORT`: move traffic to another instance with zero lost requests. A runbook:

  1. preflight  config valid, PORT is an instance and not already routed, memory budget for two
                instances side by side, current nginx config passes `nginx -t`
  2. start      `systemctl start ernie-vllm@PORT` (blocks until READY), or adopt a running one
  3. gate       /health 200, /v1/models lists the model, a real completion
  4. switch     upstream include rewritten atomically, `nginx -t`, graceful reload
  5. verify     requests through the gateway are served by PORT
  6. drain      the old instance's running + waiting requests reach 0 (bounded)
  7. stop       `systemctl stop` of the old instance (vLLM's own drain covers the rest)
  8. record     history in the state file

Undo: a failure before the switch stops the new instance (the old one never stopped serving); a
failure at switch/verify puts the old upstream back, reloads, and stops the new instance. Steps
6-7 come after traffic is verified on the new instance, so their failures are reported, never
rolled back. Re-running after a crash converges: if PORT is already routed, leftovers are
drained and stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from ernie_ops import engine, metrics, probe, state, systemd
from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError, ProbeFailed, UsageError
from ernie_ops.gateway import UPSTREAM_HEADER, Gateway

GPU_BUDGET = 0.95  # two instances on one GPU must leave this much headroom for CUDA contexts


class CutoverFailed(ErnieOpsError):
    """A step failed; the result says what was undone."""


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Timeouts:
    start: float = 900.0
    verify: float = 15.0
    drain: float = 120.0
    stop: float = 120.0


@dataclass
class CutoverResult:
    target: int
    source: int | None
    outcome: str = "pending"  # switched | already-active | converged | rolled-back | aborted | dry-run
    ok: bool = False
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def seconds(self, name: str) -> float:
        return sum(s.seconds for s in self.steps if s.name == name)


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


class Cutover:
    def __init__(
        self,
        cfg: Config,
        target: int,
        source: int | None = None,
        timeouts: Timeouts | None = None,
        dry_run: bool = False,
        on_step: Callable[[Step], None] | None = None,
        kind: str = "cutover",
    ):
        self.cfg = cfg
        self.target = target
        self.source_arg = source
        self.t = timeouts or Timeouts()
        self.dry_run = dry_run
        self.on_step = on_step or (lambda step: None)
        self.kind = kind
        self.gateway = Gateway(cfg.gateway)
        self.state_dir = Path(cfg.paths.state_dir)
        self.result = CutoverResult(target=target, source=source)

    # -- step bookkeeping ------------------------------------------------------------------
    def _step(self, name: str, fn: Callable[[], str]) -> None:
        t0 = time.monotonic()
        try:
            detail = fn() or ""
        except Exception as exc:
            step = Step(name, False, time.monotonic() - t0, str(exc))
            self.result.steps.append(step)
            self.on_step(step)
            raise
        step = Step(name, True, time.monotonic() - t0, detail)
        self.result.steps.append(step)
        self.on_step(step)

    # -- runbook ---------------------------------------------------------------------------
    def run(self) -> CutoverResult:
        self.cfg.instance(self.target)  # invalid port: usage error before the lock or anything else
        with state.cutover_lock(self.state_dir, f"{self.kind} to {self.target}"):
            return self._run_locked()

    def _run_locked(self) -> CutoverResult:
        r = self.result
        active = self.gateway.active_port()
        source = self.source_arg if self.source_arg is not None else active
        r.source = source
        if active == self.target:
            if self.dry_run:
                r.outcome, r.ok = "dry-run", True
                return r
            return self._converge()
        if source is not None and source == self.target:
            raise UsageError(f"source and target are both {self.target}")

        try:
            self._step("preflight", lambda: self._preflight(source))
        except UsageError:
            raise
        except Exception as exc:
            return self._fail("aborted", exc)
        if self.dry_run:
            r.outcome, r.ok = "dry-run", True
            return r
        try:
            self._start_or_adopt()
            self._step("gate", self._gate)
        except Exception as exc:
            self._undo_step("undo: stop new", lambda: self._stop(self.target))
            return self._fail("aborted", exc)

        previous_upstream = self.gateway.read_upstream()
        try:
            self._step("switch", self._switch)
            self._step("verify", self._verify)
        except Exception as exc:
            # switch() already put the old file back if nginx refused it; restoring again is harmless
            self._undo_step("undo: restore upstream", lambda: self._restore(previous_upstream))
            self._undo_step("undo: stop new", lambda: self._stop(self.target))
            return self._fail("rolled-back", exc)

        r.outcome, r.ok = "switched", True
        self._follow_at_boot(source)
        if source is not None:
            self._retire(source)
        self._record()
        return r

    def _fail(self, outcome: str, exc: Exception) -> CutoverResult:
        self.result.outcome, self.result.ok, self.result.error = outcome, False, str(exc)
        self._record()
        return self.result

    # -- steps -----------------------------------------------------------------------------
    def _preflight(self, source: int | None) -> str:
        problem = memory_budget_problem(self.cfg, source, self.target)
        if problem:
            raise CutoverFailed(f"memory budget: {problem}")
        self.gateway.test()
        plan = f"route {source} -> {self.target}" if source else f"route -> {self.target} (nothing routed now)"
        return f"{plan}; nginx -t ok"

    def _start_or_adopt(self) -> None:
        """A running, serving target is adopted; an abort stops the target either way (it gets no traffic)."""
        if systemd.state(self.target).active == "active":
            try:
                probe.gate(probe.base_url(self.target), self.cfg.model.served_name, self.cfg.health)
                self._step("start", lambda: f"adopted running {systemd.unit_name(self.target)} (already serving)")
                return
            except ProbeFailed:
                pass  # running but not serving: the gate below decides
        self._step("start", self._systemctl_start)

    def _systemctl_start(self) -> str:
        systemd.start(self.target, timeout=self.t.start)
        return f"{systemd.unit_name(self.target)} READY"

    def _gate(self) -> str:
        g = probe.gate(probe.base_url(self.target), self.cfg.model.served_name, self.cfg.health)
        return f"/health ok, serves {self.cfg.model.served_name}, completion {g.finish_reason} in {g.seconds:.2f}s"

    def _switch(self) -> str:
        self.gateway.switch(self.target)
        return f"upstream -> 127.0.0.1:{self.target}, nginx -t ok, reloaded"

    def _verify(self) -> str:
        """The gateway answers from the target several times in a row (old workers may answer briefly)."""
        want, streak, seen = f":{self.target}", 0, []
        deadline = time.monotonic() + self.t.verify
        with httpx.Client(timeout=5) as client:
            while time.monotonic() < deadline:
                try:
                    resp = client.get(f"{self.cfg.gateway.url}/health")
                    upstream = resp.headers.get(UPSTREAM_HEADER, "")
                    seen.append(upstream)
                    streak = streak + 1 if resp.status_code == 200 and upstream.endswith(want) else 0
                except httpx.HTTPError:
                    streak = 0
                if streak >= 3:
                    return f"gateway /health served by 127.0.0.1:{self.target}"
                time.sleep(0.05)
        raise CutoverFailed(f"gateway did not route to {self.target} within {self.t.verify:.0f}s (last upstreams: {seen[-3:]})")

    def _drain(self, port: int) -> str:
        base = probe.base_url(port)
        deadline = time.monotonic() + self.t.drain
        last = None
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                try:
                    last = metrics.snapshot(base, client=client)
                except httpx.HTTPError:
                    return "old instance does not answer /metrics (already gone)"
                if last.in_flight == 0:
                    return f"{port}: 0 running, 0 waiting"
                time.sleep(0.2)
        warning = (
            f"{port} still had {last.running:.0f} running + {last.waiting:.0f} waiting after {self.t.drain:.0f}s; "
            f"stopping it anyway (vLLM drains {self.cfg.vllm.shutdown_drain_seconds}s more)"
        )
        self.result.warnings.append(warning)
        return warning

    def _retire(self, port: int) -> None:
        """Drain and stop an instance that no longer gets traffic; failures are warnings."""
        try:
            self._step("drain", lambda: self._drain(port))
            self._step("stop", lambda: self._stop(port))
        except Exception as exc:
            self.result.warnings.append(f"retiring {port}: {exc}")

    def _follow_at_boot(self, source: int | None) -> None:
        """The routed instance is the one enabled at boot; failures are warnings (traffic has moved)."""

        def enable() -> str:
            systemd.set_enabled(self.target, True)
            if source is not None and source != self.target:
                systemd.set_enabled(source, False)
            return f"{systemd.unit_name(self.target)} enabled" + (f", {systemd.unit_name(source)} disabled" if source else "")

        try:
            self._step("enable", enable)
        except Exception as exc:
            self.result.warnings.append(f"boot state: {exc}")

    def _stop(self, port: int) -> str:
        systemd.stop(port, timeout=self.t.stop)
        return f"{systemd.unit_name(port)} stopped"

    def _record(self) -> None:
        r = self.result
        entry = {
            "kind": self.kind,
            "target": r.target,
            "source": r.source,
            "outcome": r.outcome,
            "error": r.error,
            "steps": {s.name: round(s.seconds, 3) for s in r.steps},
        }
        try:
            if r.ok:
                state.record(self.state_dir, entry, active_port=r.target, previous_port=r.source if r.source != r.target else None)
            else:
                old = state.load(self.state_dir)
                state.record(self.state_dir, entry, active_port=old.active_port, previous_port=old.previous_port)
        except OSError as exc:
            r.warnings.append(f"could not write the state file in {self.state_dir}: {exc}")

    # -- undo ------------------------------------------------------------------------------
    def _restore(self, previous_text: str) -> str:
        self.gateway.restore(previous_text)
        return "previous upstream restored, nginx reloaded"

    def _undo_step(self, name: str, fn: Callable[[], str]) -> None:
        try:
            self._step(name, fn)
        except Exception as exc:
            self.result.warnings.append(f"{name} failed: {exc}")

    # -- convergence -----------------------------------------------------------------------
    def _converge(self) -> CutoverResult:
        """PORT is already routed: check it serves, make nginx really route there, retire leftovers."""
        r = self.result
        self._step("gate", self._gate)
        try:
            self._step("verify", self._verify)
        except CutoverFailed:
            # the include names PORT but nginx did not load it (killed before reload): reload now
            self._step("switch", self._reload)
            self._step("verify", self._verify)
        leftovers = [
            i.port
            for i in self.cfg.instances
            if i.port != self.target and systemd.state(i.port).active in ("active", "activating", "reloading")
        ]
        for port in leftovers:
            self._retire(port)
        r.source = leftovers[0] if leftovers else r.source
        r.outcome = "converged" if leftovers or any(s.name == "switch" for s in r.steps) else "already-active"
        r.ok = True
        if r.outcome == "converged":
            self._follow_at_boot(leftovers[0] if leftovers else None)
            self._record()
        return r

    def _reload(self) -> str:
        self.gateway.apply()
        return "upstream already names the target; nginx -t ok, reloaded"


def rollback(cfg: Config, **kwargs: object) -> CutoverResult:
    """Back to the previous instance (from the state file, else the one other running instance)."""
    gw = Gateway(cfg.gateway)
    active = gw.active_port()
    previous = state.load(Path(cfg.paths.state_dir)).previous_port
    if previous is None or previous == active:
        others = [i.port for i in cfg.instances if i.port != active]
        if len(others) != 1:
            raise UsageError(f"no previous port recorded and {len(others)} candidates {others}; name one: ernie-ops cutover PORT")
        previous = others[0]
    return Cutover(cfg, previous, kind="rollback", **kwargs).run()
