"""Cutover marks for Prometheus, through the node exporter's textfile collector (config `monitoring.textfile`).

ernie-ops writes them after every cutover, rollback and first route: the port nginx routes to, and when each
kind of cutover last ended with each outcome. The dashboard annotates cutovers from them (an instance start
also happens on a crash restart; these happen only when ernie-ops moved, or tried to move, traffic) and shows
the routed port. On a pool (pool.replicas > 1) they say its size and how many replicas are in rotation (the pool
watch rewrites them at every change): ErniePoolDegraded fires on them. A mark that cannot be written is a warning,
never a failed cutover.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from ernie_ops.config import Config
from ernie_ops.host import state
from ernie_ops.traffic.gateway import Gateway, GatewayError, in_rotation


def _epoch(at: object) -> float | None:
    try:
        return datetime.strptime(str(at), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def registry(routed_port: int | None, history: list[dict], pool: tuple[int, int] | None = None) -> CollectorRegistry:
    """ernie_ops_routed_port (absent while nginx splits traffic or routes nowhere),
    ernie_ops_cutover_last_timestamp_seconds{kind, outcome}: the newest history entry of each pair, and on a pool
    (`pool`: its size, the replicas in rotation) ernie_ops_pool_replicas and ernie_ops_pool_replicas_in_rotation."""
    reg = CollectorRegistry()
    if routed_port is not None:  # an unlabelled gauge would say 0 otherwise
        Gauge("ernie_ops_routed_port", "The instance port nginx routes every request to.", registry=reg).set(routed_port)
    if pool is not None:
        size, in_rotation = pool
        Gauge("ernie_ops_pool_replicas", "The replicas this host's pool serves from (pool.replicas).", registry=reg).set(size)
        Gauge("ernie_ops_pool_replicas_in_rotation", "The pool's replicas the gateway sends requests to now.", registry=reg).set(
            in_rotation
        )
    last = Gauge(
        "ernie_ops_cutover_last_timestamp_seconds",
        "When a cutover of this kind last ended with this outcome.",
        ["kind", "outcome"],
        registry=reg,
    )
    newest: dict[tuple[str, str], float] = {}
    for entry in history:
        at = _epoch(entry.get("at"))
        if at is not None and entry.get("kind") and entry.get("outcome"):
            key = (str(entry["kind"]), str(entry["outcome"]))
            newest[key] = max(newest.get(key, at), at)
    for (kind, outcome), at in sorted(newest.items()):
        last.labels(kind=kind, outcome=outcome).set(at)
    return reg


def write(cfg: Config) -> str | None:
    """Write the marks file from the gateway's include and the history; a warning when it could not be."""
    path = cfg.monitoring.textfile
    if not path:
        return None
    gw, routed, pool = Gateway(cfg.gateway), None, None
    try:
        if cfg.pool.replicas > 1:  # a pool routes no single port: its size and the replicas not marked down
            pool = (cfg.pool.replicas, len(in_rotation(gw.read_upstream())))
        else:
            routed = gw.active_port()
    except (GatewayError, OSError):
        pool = (cfg.pool.replicas, 0) if cfg.pool.replicas > 1 else None  # no include: nothing in rotation
    history = state.load(Path(cfg.paths.state_dir)).history
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(path, registry(routed, history, pool))
    except OSError as exc:
        return f"the cutover marks were not written to {path} (monitoring.textfile): {exc.strerror or exc}"
    return None
