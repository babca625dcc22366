"""`ernie-ops status`: the truth from nginx (include + live header), systemd and each instance."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from ernie_ops.client.headers import UPSTREAM_HEADER
from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError
from ernie_ops.host import ports, state, systemd
from ernie_ops.serving import probe
from ernie_ops.stats import metrics
from ernie_ops.traffic import gateway
from ernie_ops.traffic.canary import rollout_file
from ernie_ops.traffic.gateway import Gateway


@dataclass
class InstanceStatus:
    port: int
    unit: str
    healthy: bool
    model_ok: bool | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    routed: bool = False
    error: str | None = None
    foreign: bool = False  # the unit is not running, yet something holds its port
    holder: str | None = None  # who, when foreign: "pid 1234 python3, `ss -ltnp sport = :8001`"
    says: str | None = None  # when it does not serve: the launcher's last STATUS= (systemd keeps it after a failure)


@dataclass
class Status:
    gateway_url: str
    routed_port: int | None  # what the upstream include says
    live_port: int | None  # what nginx actually answered from (X-Ernie-Upstream on /health)
    gateway_health: int | None  # HTTP status of the gateway's /health
    instances: list[InstanceStatus] = field(default_factory=list)
    last_change: dict | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not about serving (e.g. a corrupt state file): ok stays true
    split: dict[int, float] = field(default_factory=dict)  # port -> % of traffic, during a canary step
    rollout: dict | None = None  # the canary/bake in progress (rollout_file): phase, live verdict, watcher
    pool: dict | None = None  # a pool (pool.replicas > 1): size, the replicas the include lists, those in rotation

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


UnitQuery = Callable[[int], systemd.UnitState]


def _instance(cfg: Config, port: int, routed: int | None, client: httpx.Client, unit_state: UnitQuery) -> InstanceStatus:
    try:
        unit_st = unit_state(port)
        unit, said = unit_st.active, unit_st.status_text
    except ErnieOpsError:
        unit, said = "unknown", ""
    base = probe.base_url(port)
    timeout = cfg.health.request_timeout_seconds
    st = InstanceStatus(port=port, unit=unit, healthy=probe.alive(client, base, timeout), routed=port == routed)
    if not st.healthy and unit != "inactive" and said:
        st.says = said  # e.g. why the engine died, which process and which signal; or what a start is doing
    if unit != "unknown" and (held := ports.foreign_holder(port, unit)) is not None:
        # What answers there is not this instance: its health, model and metrics are someone else's.
        st.foreign, st.holder = True, held.describe()
        st.error = foreign_problem(st, answers=st.healthy)
        st.healthy = False
        return st
    if not st.healthy:
        return st
    try:
        st.model_ok = cfg.model.served_name in probe.served_models(client, base, timeout)
        snap = metrics.snapshot(base, timeout, client)
        st.running, st.waiting, st.kv_cache_usage = snap.running, snap.waiting, snap.kv_cache_usage
        st.ttft_p50, st.ttft_p99 = snap.ttft_p50, snap.ttft_p99
    except (ErnieOpsError, httpx.HTTPError, ValueError) as exc:
        st.error = str(exc)
    return st


def foreign_problem(inst: InstanceStatus, answers: bool) -> str:
    what = "answers" if answers else "is bound"
    return (
        f"port {inst.port} {what} but {systemd.unit_name(inst.port).removesuffix('.service')} is {inst.unit}: "
        f"another process holds the port ({inst.holder}); stop it, "
        + ("nginx routes to it now" if inst.routed else "or a cutover would route to it")
    )


def collect(cfg: Config, unit_state: UnitQuery = systemd.state) -> Status:
    """`unit_state`: systemd's view of one instance (injectable: tests cannot own real units)."""
    gw = Gateway(cfg.gateway)
    problems: list[str] = []
    pool = None
    try:
        if cfg.pool.replicas > 1:  # every replica a server of the include: no canary split, no single routed port
            text = gw.read_upstream()
            in_rotation = gateway.in_rotation(text)
            pool = {"size": cfg.pool.replicas, "replicas": list(gateway.marks_of(text)), "in_rotation": in_rotation,
                    "held": gateway.held_of(text)}  # fmt: skip
            shares = gateway.shares(dict.fromkeys(in_rotation, 1))
        else:
            shares = gateway.shares(gw.weights())
    except ErnieOpsError as exc:
        shares, problems = {}, [str(exc)]
    routed = max(shares, key=lambda p: shares[p]) if shares and pool is None else None  # a canary step: the larger side
    split = shares if len(shares) > 1 and pool is None else {}
    live, code, warnings = None, None, []
    with httpx.Client(timeout=cfg.health.request_timeout_seconds, verify=cfg.gateway.tls_verify()) as client:
        try:
            resp = client.get(f"{cfg.gateway.url}/health")
            code = resp.status_code
            upstream = resp.headers.get(UPSTREAM_HEADER, "")
            live = int(upstream.rsplit(":", 1)[1]) if ":" in upstream else None
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"gateway {cfg.gateway.url} does not answer: {exc}")
        instances = []
        for i in cfg.instances:
            inst = _instance(cfg, i.port, routed, client, unit_state)
            inst.routed = i.port in shares
            if inst.foreign:
                problems.append(inst.error)
            instances.append(inst)
    if code is not None and code != 200:
        problems.append(f"gateway /health is {code}: the routed instance {routed} does not serve")
    if pool is not None and len(pool["in_rotation"]) < pool["size"]:
        out = [p for p in pool["replicas"] if p not in pool["in_rotation"] and p not in pool["held"]]
        why = [f"{', '.join(map(str, out))} taken out: `ernie-ops logs` says why"] if out else []
        why += [f"{p} held out by an upgrade ({reason}): `ernie-ops apply` replaces it again" for p, reason in pool["held"].items()]
        said = f" ({'; '.join(why)})" if why else ""
        problems.append(f"the pool serves from {len(pool['in_rotation'])} of its {pool['size']} replicas{said}")
    if pool is not None and (full := saturated(pool["in_rotation"], instances)):
        warnings.append(full)
    if live is not None and routed is not None and live != routed and not split:
        problems.append(f"nginx answers from {live} but the include names {routed}: a reload is pending (rerun the cutover)")
    for inst in instances:
        if inst.routed and not inst.healthy and not inst.foreign:
            problems.append(f"routed instance {inst.port} is not healthy (unit {inst.unit})" + (f": {inst.says}" if inst.says else ""))
        if inst.model_ok is False:
            problems.append(f"{inst.port} does not serve {cfg.model.served_name}")
    saved = state.load(Path(cfg.paths.state_dir))
    if pool is not None:  # what each replica runs, as the pool's upgrades noted it (none yet: never upgraded here)
        pool["versions"] = {int(p): e.get("version", "") for p, e in saved.replicas.items() if p.isdigit() and int(p) in pool["replicas"]}
    last = saved.history[-1] if saved.history else None
    warnings += list(saved.warnings)
    live_rollout = _rollout(Path(cfg.paths.state_dir), split, problems, warnings)
    return Status(cfg.gateway.url, routed, live, code, instances, last, problems, warnings, split, live_rollout, pool)


def saturated(in_rotation: list[int], instances: list[InstanceStatus]) -> str | None:
    """A sentence when the pool has no headroom: every replica in rotation has requests waiting for a slot, so a new
    request waits wherever the gateway sends it. Queueing, not KV use: a small model runs out of compute long before
    its KV cache fills (docs/design/replica-pool.md)."""
    shown = [i for i in instances if i.port in in_rotation and i.waiting is not None]
    if not in_rotation or len(shown) < len(in_rotation) or not all(i.waiting > 0 for i in shown):
        return None
    waiting, running = sum(i.waiting for i in shown), sum(i.running or 0 for i in shown)
    return (
        f"the pool is saturated: every replica in rotation has requests waiting ({waiting:g} waiting, {running:g} running "
        f"over {len(shown)}); add replicas or a host, or lower max_tokens"
    )


def _rollout(state_dir: Path, split: dict[int, float], problems: list[str], warnings: list[str]) -> dict | None:
    """The canary/bake in progress, and a problem when nobody watches it or traffic is split without one."""
    try:
        r = rollout_file.load(state_dir, keep_corrupt_aside=False)
    except rollout_file.RolloutFileError as exc:
        warnings.append(str(exc))
        r = None
    if r is None:
        if split:
            shares = ", ".join(f"{p} {s:.0f}%" for p, s in split.items())
            problems.append(
                f"the gateway splits traffic ({shares}) but no rollout is recorded, so nothing watches it; "
                "route all of it to one instance: ernie-ops cutover PORT"
            )
        return None
    alive = r.watcher_alive()
    left = max(0.0, r.bake_until - time.time()) if r.phase == "bake" and r.bake_until else None
    verdict = r.verdict or {}
    out = {
        "phase": r.phase,
        "what": r.describe(),
        "source": r.source,
        "target": r.target,
        "percent": r.percent,
        "step": r.step + 1 if r.phase == "canary" else None,
        "steps": r.steps,
        "bake_left_seconds": None if left is None else round(left, 1),
        "verdict": verdict.get("result"),
        "verdict_detail": "; ".join(f"{c['name']}: {c['detail']}" for c in verdict.get("checks", []) if c.get("result") != "pass")
        or (verdict.get("canary") or ""),
        "verdict_age_seconds": None if r.verdict_at is None else round(time.time() - r.verdict_at, 1),
        "watcher_pid": r.pid,
        "watched": alive,
    }
    if not alive:
        gone = f"{r.describe()}, with nobody watching (the cutover, pid {r.pid}, is gone)"
        if r.phase in ("rollback", "promote"):
            problems.append(f"{gone}; finish it: `ernie-ops cutover {r.target}` completes the {r.phase} under way")
        else:
            problems.append(
                f"{gone}: nginx sends {r.percent}% to {r.target}; resume it with `ernie-ops cutover {r.target}`, or end it: "
                f"`ernie-ops cutover --abort` (all back to {r.source}) or `--promote` (all to {r.target})"
            )
    return out
