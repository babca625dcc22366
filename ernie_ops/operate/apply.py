"""`ernie-ops route` and `ernie-ops apply`: what provisioning asks of a host after it changed files.

route  Which instance nginx routes to (read from the upstream include), or, on a fresh host with no
       include yet, the initial one; and the spare port a cutover would start. `--init` writes the
       include for a fresh host (never over an existing route).
apply  Brings each service up to date with its inputs, one decision per service:
         not running                        -> start it (and enable it at boot)
         running, started before an input   -> engine: cut over to the spare (or restart, by mode)
         changed                               chat: restart ernie-chainlit.service
         running, newer than every input    -> nothing
       Inputs are the files a start reads: ernie.yaml, the unit file and its drop-ins, its
       EnvironmentFile, the venv of its ExecStart (symlink switches and the installed ernie_ops
       code) and, for the engine, the model path (symlink switches).

Truth is read, not remembered: "changed after the start" compares file times with systemd's own
start timestamp of the running process, so a provisioning run that died before applying still
applies on the next run, and a second run finds nothing to do. Every host operation goes through
the `Host` protocol (`RealApplyHost` on a real host), so the decisions are unit-tested without systemd.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from ernie_ops import config as config_mod
from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError, UsageError
from ernie_ops.files import atomic
from ernie_ops.host import state, systemd
from ernie_ops.traffic import cutover as cutover_mod
from ernie_ops.traffic import hostops, marks, pool_plan, pool_route, pool_upgrade, runbook
from ernie_ops.traffic.canary import rollout
from ernie_ops.traffic.canary.replica_gate import ReplicaGate
from ernie_ops.traffic.canary.watch import RealMeter
from ernie_ops.traffic.gateway import Gateway, GatewayError, held_of, marked_down, marks_of, render_pool, render_upstream

CHAT_UNIT = "ernie-chainlit.service"
MODES = ("cutover", "restart", "none")
UNIT_PROPS = (
    "ActiveState", "UnitFileState", "ExecMainStartTimestampMonotonic", "FragmentPath", "DropInPaths",
    "EnvironmentFiles", "ExecStart",
)  # fmt: skip
RUNNING = {"active", "reloading"}
BUSY = {"activating", "deactivating"}


# -- routing ---------------------------------------------------------------------------------
@dataclass
class Route:
    routed_port: int
    spare_port: int | None
    initial: bool  # True: no include names a port yet; routed_port is the fresh host's first route
    upstream_file: str
    changed: bool = False  # route --init wrote the include (or its keyed twin)
    warnings: list[str] = field(default_factory=list)  # e.g. the cutover marks not written
    replicas: list[int] = field(default_factory=list)  # a pool (pool.replicas > 1): the port serving in each slot

    def as_dict(self) -> dict:
        return asdict(self)


def spare_port(cfg: Config, routed: int) -> int | None:
    """The instance a cutover starts next: the first configured port that is not routed."""
    return next((i.port for i in cfg.instances if i.port != routed), None)


def route(cfg: Config, initial: int | None = None) -> Route:
    """Where traffic goes now, or would go first on a fresh host."""
    if initial is not None:
        cfg.instance(initial)  # a usage error naming the configured ports
    gw = Gateway(cfg.gateway)
    try:
        text = gw.read_upstream()
    except GatewayError:
        text = ""  # no include yet: a fresh host
    if cfg.pool.replicas > 1:
        replicas = pool_route.replicas(cfg, text, cfg.gateway.upstream_file)
        return Route(replicas[0], None, not marks_of(text), cfg.gateway.upstream_file, replicas=replicas)
    routed = gw.single_port(text)
    if routed is not None:
        fresh = False
        cfg.instance(routed)  # routed to a port the config no longer lists: say so, do not guess
    else:
        routed, fresh = (initial if initial is not None else cfg.instances[0].port), True
    return Route(routed, spare_port(cfg, routed), fresh, cfg.gateway.upstream_file)


def init_route(cfg: Config, initial: int | None = None, check: bool = False) -> Route:
    """A fresh host's first route: write the include naming the initial port; an existing route wins (its keyed
    twin is written when missing or out of step)."""
    r = route(cfg, initial)
    gw = Gateway(cfg.gateway, cfg.pool.session_affinity)
    # a fresh host gets its first route; a host from before the keyed twin (or with a twin out of step) gets the twin
    # of the route it has, which the role's `nginx -t` and reload then take up with the new ernie-ops.conf
    if r.initial or not gw.keyed_in_step():
        r.changed = True
        if not check:
            path = Path(cfg.gateway.upstream_file)
            first = render_pool(r.replicas, cfg.pool.balance) if r.replicas else render_upstream(r.routed_port)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                gw.write_upstream(first if r.initial else gw.read_upstream())
            except OSError as exc:
                raise GatewayError(f"cannot write the upstream include {path} (gateway.upstream_file): {exc.strerror or exc}") from None
    if not check and (warning := marks.write(cfg)) is not None:  # also on an existing route: a newly set textfile
        r.warnings.append(warning)
    return r


# -- what a running service was started with -----------------------------------------------------
def path_time(path: str | Path) -> float | None:
    """When `path` last changed as a start would see it: the newest of the symlinks on its way
    (a switched `current` or venv link) and, for a regular file, its content. Directories' own
    times are left out (staging a new version beside the current one touches the parent). None
    when it does not exist."""
    times: list[float] = []
    pending = list(Path(os.path.abspath(path)).parts[1:])
    cur, hops = Path("/"), 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            cur = cur.parent
            continue
        nxt = cur / part
        try:
            st = os.lstat(nxt)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            times.append(st.st_mtime)
            hops += 1
            if hops > 40:  # a loop of links
                return None
            target = os.readlink(nxt)
            if os.path.isabs(target):
                cur = Path("/")
                pending = [*Path(target).parts[1:], *pending]
            else:
                pending = [*Path(target).parts, *pending]
            continue
        cur = nxt
        if not pending and stat.S_ISREG(st.st_mode):
            times.append(st.st_mtime)
    return max(times, default=0.0)


def unit_inputs(props: dict[str, str], extra: list[str]) -> list[str]:
    """The files a start of this unit reads, from systemd's own view of it plus `extra`."""
    paths = [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split()]
    paths += [m.group(1) for m in re.finditer(r"(\S+) \(ignore_errors=", props.get("EnvironmentFiles", ""))]
    exe = re.search(r"path=(\S+)", props.get("ExecStart", ""))
    if exe:
        paths.append(exe.group(1))
        venv = Path(exe.group(1)).parent.parent
        paths += sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "ernie_ops" / "__init__.py")))
    return [p for p in [*paths, *extra] if p]


# -- host operations ---------------------------------------------------------------------------
class Host(Protocol):
    """What `apply` asks of the host, behind one small interface (the style of `traffic.hostops.HostOps`), so its
    decisions are unit-tested against a fake host and run on the real one via `RealApplyHost`."""

    def props(self, unit: str) -> dict[str, str]:
        """systemd's UNIT_PROPS of `unit` (ActiveState, start timestamp, the files a start reads)."""

    def path_time(self, path: str) -> float | None:
        """When `path` last changed as a start would see it (module `path_time`); None when it does not exist."""

    def now(self) -> tuple[float, float]:
        """(wall clock, monotonic clock) read together: a start's monotonic stamp becomes a wall time."""

    def systemctl(self, verb: str, unit: str, timeout: float) -> None:
        """`systemctl VERB UNIT`; raises systemd.StartFailed / SystemdError with the unit's own reason."""

    def run_cutover(self, cfg: Config, target: int, start_timeout: float) -> dict:
        """A cutover to `target` as the runbook reports it (`CutoverResult.as_dict()`)."""

    def upstream_text(self, cfg: Config) -> str:
        """The upstream include as it is ("" when there is none yet)."""

    def route_pool(self, cfg: Config, ports: list[int]) -> None:
        """Every replica in `ports` in rotation (`Gateway.route_pool`: write, nginx -t, reload; restored on failure)."""

    def run_pool_upgrade(self, cfg: Config, replicas: list[int], stale: list[int], extra: list[str], start_timeout: float) -> dict:
        """The pool upgrade of the `stale` replicas (`PoolResult.as_dict()`), under the state lock."""


class RealApplyHost:
    """The host as it is: systemctl and systemd's properties, the file system, real clocks, the cutover runbook."""

    def props(self, unit: str) -> dict[str, str]:
        return systemd.show(unit, *UNIT_PROPS)

    def path_time(self, path: str) -> float | None:
        return path_time(path)

    def now(self) -> tuple[float, float]:
        return time.time(), time.monotonic()

    def systemctl(self, verb: str, unit: str, timeout: float) -> None:
        systemd.run_verb(verb, unit, timeout)

    def run_cutover(self, cfg: Config, target: int, start_timeout: float) -> dict:
        plan = rollout.Plan.chosen(cfg.cutover)  # canary steps and bake window as configured (upgrade.yml: ernie_ops_cutover)
        return cutover_mod.Cutover(cfg, target, timeouts=runbook.Timeouts(start=start_timeout), plan=plan).run().as_dict()

    def upstream_text(self, cfg: Config) -> str:
        try:
            return Gateway(cfg.gateway).read_upstream()
        except GatewayError:
            return ""

    def route_pool(self, cfg: Config, ports: list[int]) -> None:
        with state.cutover_lock(Path(cfg.paths.state_dir), "routing the pool"):  # the watch and a cutover take it too
            Gateway(cfg.gateway, cfg.pool.session_affinity).route_pool(ports, cfg.pool.balance)

    def run_pool_upgrade(self, cfg: Config, replicas: list[int], stale: list[int], extra: list[str], start_timeout: float) -> dict:
        steps = [s for s in pool_plan.plan(cfg, replicas, pool_plan.side_by_side_problem(cfg)) if s.old in stale]
        for s in steps:  # a surge port running with the old inputs would be adopted as the new version: stop it first
            spare = look(self, systemd.unit_name(s.new), extra)
            if s.surge and spare.active in RUNNING and spare.stale:
                self.systemctl("stop", spare.unit, 300)
        ops = hostops.RealHost(cfg)
        try:
            with state.cutover_lock(Path(cfg.paths.state_dir), f"pool upgrade of {', '.join(map(str, stale))}"):
                text = self.upstream_text(cfg)
                down, held = marked_down(text), held_of(text)  # the watch's marks, an earlier upgrade's holds
                timeouts = runbook.Timeouts(start=start_timeout)
                plan, gate = rollout.Plan.chosen(cfg.cutover), None
                if plan.watched:  # a canary configured: each new replica judged against the old ones, then the bake
                    gate = ReplicaGate(cfg.cutover, lambda ports: RealMeter(cfg, ports), time.sleep)
                upgrade = pool_upgrade.PoolUpgrade(
                    ops, replicas, steps, timeouts, down=down, eval_gate=cfg.cutover.eval, slo_gate=gate, held=held,
                    bake_seconds=plan.bake_seconds,
                )  # fmt: skip
                return upgrade.run().as_dict()
        finally:
            ops.close()


@dataclass
class Seen:
    """One unit as it runs now and which of its inputs changed after its start."""

    unit: str
    active: str
    enabled: str
    started_at: float | None  # wall clock; None when no process runs
    newer: list[str] = field(default_factory=list)
    start_stamp: int = 0  # systemd's ExecMainStartTimestampMonotonic: which process this is
    unread_change: str | None = None  # a file that changed after the start, but not in a part this service reads

    @property
    def stale(self) -> bool:
        return bool(self.newer)


def look(host: Host, unit: str, extra_inputs: list[str]) -> Seen:
    props = host.props(unit)
    active = props.get("ActiveState", "unknown")
    mono_us = int(props.get("ExecMainStartTimestampMonotonic") or 0)
    started_at = None
    if active in RUNNING | BUSY and mono_us:
        wall, mono = host.now()
        started_at = wall - (mono - mono_us / 1e6)
    newer = []
    if started_at is not None:
        for path in unit_inputs(props, extra_inputs):
            t = host.path_time(path)
            if t is not None and t > started_at:
                newer.append(path)
    return Seen(unit, active, props.get("UnitFileState", ""), started_at, newer, mono_us)


# -- which part of ernie.yaml a service reads -------------------------------------------------------
# The engine (launcher + vLLM) reads the model, vllm, instances, paths and health sections; the chat app its
# section, the gateway URL it talks to and the model name. A change elsewhere in the file (or a comment) does not
# reach it: a new cutover plan or gateway URL is read by the next `ernie-ops cutover`, never restarts an engine
# (seen in e2e: upgrade.yml's cutover plan, absent from the next site.yml run, cut every host over once more).
ENGINE_SECTIONS = ("model", "vllm", "instances", "paths", "health")
READS = {
    "engine": lambda d: {k: d.get(k) for k in ENGINE_SECTIONS},
    "chat": lambda d: {
        "chat": d.get("chat"),
        "model": d.get("model"),
        "gateway_url": (d.get("gateway") or {}).get("url"),
        # only when set: a process started before the key existed keeps its digest
        **({"gateway_ca_file": ca} if (ca := (d.get("gateway") or {}).get("ca_file")) else {}),
    },
}
APPLIED_FILE = "applied.json"


def config_digest(cfg: Config, service: str) -> str:
    data = READS[service](cfg.model_dump(mode="json"))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _applied(cfg: Config) -> dict:
    try:
        data = json.loads((Path(cfg.paths.state_dir) / APPLIED_FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # no record: the file times alone decide (a restart too many, never one too few)


def _remember(cfg: Config, applied: dict, records: dict[str, dict]) -> str | None:
    """Which config digest each running process started with; a warning when it cannot be written."""
    path = Path(cfg.paths.state_dir) / APPLIED_FILE
    try:
        data = {**applied, **records}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(data, indent=2, sort_keys=True))
    except OSError as exc:
        return f"could not record the applied config in {path}: {exc.strerror or exc}"
    return None


def _forgive_config(cfg: Config, applied: dict, seen: Seen, service: str, config_path: str) -> None:
    """The config file is newer than the process, but the part this service reads is what it
    started with (recorded for this very process): not a reason to act."""
    rec = applied.get(seen.unit, {})
    if config_path in seen.newer and rec.get("start_stamp") == seen.start_stamp and rec.get("digest") == config_digest(cfg, service):
        seen.newer.remove(config_path)
        seen.unread_change = config_path


# -- decisions (pure) --------------------------------------------------------------------------
@dataclass
class Action:
    service: str  # engine | chat
    unit: str
    action: str  # start | cutover | restart | pending | enable | none
    reason: str
    target: str | None = None
    newer: list[str] = field(default_factory=list)
    done: bool = False
    result: dict | None = None
    error: str | None = None

    @property
    def changes(self) -> bool:
        return self.action not in ("none", "pending")


def _not_running(service: str, seen: Seen, start: bool, why_start: str) -> Action | None:
    """Busy (starting or stopping): leave it; stopped: start it (unless told not to); running: None."""
    unit = seen.unit
    if seen.active in BUSY:
        return Action(service, unit, "none", f"{unit} is {seen.active}; wait for it and rerun `ernie-ops apply`")
    if seen.active in RUNNING:
        return None
    if not start:
        return Action(service, unit, "none", f"{unit} is {seen.active} and starting was not asked for (--no-start)")
    return Action(service, unit, "start", why_start, target=unit)


def decide_engine(seen: Seen, routed: int, spare: int | None, mode: str, start: bool) -> Action:
    unit = seen.unit
    if action := _not_running("engine", seen, start, f"nothing serves on the routed port {routed}: start it"):
        return action
    if not seen.stale:
        return _serving(seen)
    changed = ", ".join(seen.newer)
    if mode == "none":
        how = f"`ernie-ops cutover {spare}`" if spare is not None else f"`systemctl restart {unit}`"
        return Action(
            "engine", unit, "pending", f"changed since {unit} started: {changed}; not applied (mode none): run {how}", newer=seen.newer
        )
    if mode == "cutover" and spare is not None:
        return Action("engine", unit, "cutover", f"changed since {unit} started: {changed}", target=str(spare), newer=seen.newer)
    why = "" if mode == "restart" else " (no spare instance configured: restart)"
    return Action("engine", unit, "restart", f"changed since {unit} started: {changed}{why}", target=unit, newer=seen.newer)


def _serving(seen: Seen) -> Action:
    """An engine unit that runs and started after every input it reads changed: enable it at boot if it is not."""
    unit = seen.unit
    if seen.enabled not in ("enabled", "enabled-runtime"):
        return Action("engine", unit, "enable", f"{unit} serves but does not start at boot ({seen.enabled or 'unknown'})", target=unit)
    if seen.unread_change:
        return Action("engine", unit, "none", f"{unit} serves; {seen.unread_change} changed only in what it does not read")
    return Action("engine", unit, "none", f"{unit} serves and started after every input changed")


def decide_chat(seen: Seen, start: bool) -> Action:
    unit = seen.unit
    if action := _not_running("chat", seen, start, "the chat app is not running: start it"):
        return action
    if seen.stale:
        return Action("chat", unit, "restart", f"changed since it started: {', '.join(seen.newer)}", target=unit, newer=seen.newer)
    if seen.enabled not in ("enabled", "enabled-runtime"):
        return Action("chat", unit, "enable", f"{unit} runs but does not start at boot", target=unit)
    if seen.unread_change:
        return Action("chat", unit, "none", f"the chat app runs; {seen.unread_change} changed only in what it does not read")
    return Action("chat", unit, "none", "the chat app started after every input changed")


# -- the command -------------------------------------------------------------------------------
@dataclass
class ApplyResult:
    check: bool
    actions: list[Action] = field(default_factory=list)
    route: dict | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(a.error is None for a in self.actions)

    @property
    def changed(self) -> bool:
        return any(a.changes for a in self.actions)

    @property
    def message(self) -> str | None:
        """What failed, for a reader (the Ansible role ends with it): each failed action's error, which for a start
        is the unit's own reason and the command that shows its journal (systemd.StartFailed). None when all went well."""
        return "\n".join(a.error for a in self.actions if a.error) or None

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "changed": self.changed,
            "check": self.check,
            "route": self.route,
            "message": self.message,
            "actions": [asdict(a) for a in self.actions],
        }


def apply(
    cfg: Config,
    config_path: str,
    services: tuple[str, ...] = ("engine", "chat"),
    mode: str = "cutover",
    check: bool = False,
    start: bool = True,
    initial: int | None = None,
    start_timeout: float = 900.0,
    host: Host | None = None,
) -> ApplyResult:
    if mode not in MODES:
        raise UsageError(f"mode '{mode}' is not one of {', '.join(MODES)}")
    host = host or RealApplyHost()
    res = ApplyResult(check)
    applied = _applied(cfg)  # the digest each running process started with, read once
    settled: list[tuple[str, str, list[str]]] = []  # (service, unit, inputs) to record after acting
    if "engine" in services and cfg.pool.replicas > 1:
        settled += _apply_pool(cfg, host, res, config_path, applied, mode, check, start, start_timeout)
    elif "engine" in services:
        r = route(cfg, initial)
        res.route = r.as_dict()
        extra = [config_path, cfg.model.path]
        seen = look(host, systemd.unit_name(r.routed_port), extra)
        _forgive_config(cfg, applied, seen, "engine", config_path)
        action = decide_engine(seen, r.routed_port, r.spare_port, mode, start)
        res.actions.append(action)
        if not check:
            _run_engine(cfg, host, action, extra, start_timeout)
            routed_now = int(action.target) if action.action == "cutover" and action.done else r.routed_port
            settled.append(("engine", systemd.unit_name(routed_now), extra))
    if "chat" in services:
        seen = look(host, CHAT_UNIT, [config_path])
        _forgive_config(cfg, applied, seen, "chat", config_path)
        action = decide_chat(seen, start)
        res.actions.append(action)
        if not check:
            _run_unit_action(host, action, start_timeout)
            settled.append(("chat", CHAT_UNIT, [config_path]))
    records = {}
    for service, unit, inputs in settled:
        now = look(host, unit, inputs)
        if now.started_at is not None and config_path not in now.newer:  # it started with the config as it is now
            records[unit] = {"start_stamp": now.start_stamp, "digest": config_digest(cfg, service)}
    if records and (warning := _remember(cfg, applied, records)):
        res.warnings.append(warning)
    return res


def _apply_pool(
    cfg: Config, host: Host, res: ApplyResult, config_path: str, applied: dict, mode: str, check: bool, start: bool, start_timeout: float
) -> list[tuple[str, str, list[str]]]:
    """A pool: every replica started (and enabled) when it is not running; the replicas whose inputs changed replaced
    by the pool upgrade, one at a time (traffic/pool_upgrade.py); then every replica in the include (a host grown from
    one replica gets the new ones once they serve)."""
    r = route(cfg)
    res.route = r.as_dict()
    extra = [config_path, cfg.model.path]
    held = held_of(host.upstream_text(cfg))
    actions = []
    for port in r.replicas:
        seen = look(host, systemd.unit_name(port), extra)
        _forgive_config(cfg, applied, seen, "engine", config_path)
        actions.append(decide_replica(seen, port, mode, start, held.get(port)))
    res.actions += actions
    if check:
        return []
    for action in actions:
        _run_unit_action(host, action, start_timeout)
    replicas = list(r.replicas)
    upgrades = [a for a in actions if a.action == "upgrade"]
    if upgrades and all(a.error is None for a in actions):
        stale = [int(a.target) for a in upgrades if a.target]
        try:
            result = host.run_pool_upgrade(cfg, replicas, stale, extra, start_timeout)
        except ErnieOpsError as exc:
            result = {"ok": False, "error": str(exc), "replicas": replicas}
        upgrades[0].result = result
        if result.get("ok"):
            for a in upgrades:
                a.done = True
        else:
            upgrades[0].error = f"pool upgrade: {result.get('error')}"
        replicas = list(result.get("replicas") or replicas)
        res.route["replicas"] = replicas  # a surge moved a slot to its second port
    serving = all(a.error is None and (a.done or a.action in ("none", "pending")) for a in actions)
    unrouted = pool_route.missing(cfg, host.upstream_text(cfg), cfg.gateway.upstream_file)
    if serving and unrouted:
        what = ", ".join(map(str, unrouted))
        routing = Action("engine", cfg.gateway.upstream_file, "route", f"replica(s) {what} serve but are not routed: route them")
        res.actions.append(routing)
        try:
            host.route_pool(cfg, replicas)  # as the upgrade left them, not as they were before it
            routing.done = True
        except ErnieOpsError as exc:
            routing.error = f"replica(s) {what} serve but the gateway still routes only the others: {exc}"
    return [("engine", systemd.unit_name(p), extra) for p in replicas] if all(a.error is None for a in res.actions) else []


def decide_replica(seen: Seen, port: int, mode: str, start: bool, held: str | None = None) -> Action:
    """One replica of a pool: started when it does not run; one whose inputs changed, or that an earlier upgrade holds
    out of rotation (`held`: a gate it failed), is replaced by the pool upgrade (traffic/pool_upgrade.py: replica by
    replica, a surge where the slot has room, else in place), or, in mode none, left for `ernie-ops apply` to do."""
    unit = seen.unit
    if action := _not_running("engine", seen, start, f"replica {port} does not serve: start it"):
        return action
    if seen.stale or held:
        why = f"changed since {unit} started: {', '.join(seen.newer)}" if seen.stale else f"held out of rotation by an upgrade: {held}"
        if mode == "none":
            return Action("engine", unit, "pending", f"{why}; not applied (mode none): run `ernie-ops apply`", newer=seen.newer)
        return Action("engine", unit, "upgrade", why, target=str(port), newer=seen.newer)
    return _serving(seen)


def _run_engine(cfg: Config, host: Host, action: Action, extra: list[str], start_timeout: float) -> None:
    if action.action != "cutover":
        _run_unit_action(host, action, start_timeout)
        return
    spare = int(action.target)
    try:
        spare_seen = look(host, systemd.unit_name(spare), extra)
        if spare_seen.active in RUNNING and spare_seen.stale:
            # unrouted and started before the change: the cutover would adopt it with the old inputs
            host.systemctl("stop", spare_seen.unit, 300)
        result = host.run_cutover(cfg, spare, start_timeout)
    except ErnieOpsError as exc:
        action.error = str(exc)
        return
    action.result = result
    if result.get("ok"):
        action.done = True
    else:
        where = f" ({result['where']})" if result.get("where") else ""  # e.g. "the old instance 8000 keeps serving"
        action.error = f"cutover to {spare} {result.get('outcome')}{where}: {result.get('error')}"


def _run_unit_action(host: Host, action: Action, timeout: float) -> None:
    verbs = {"start": ["enable", "start"], "restart": ["restart"], "enable": ["enable"]}.get(action.action, [])
    try:
        for verb in verbs:
            host.systemctl(verb, action.unit, timeout)
    except ErnieOpsError as exc:
        action.error = str(exc)
        return
    action.done = bool(verbs)


def load_for(path: str | None) -> tuple[Config, str]:
    """The config and the file it came from (an input of every service)."""
    return config_mod.load(path), config_mod.resolve_path(path)
