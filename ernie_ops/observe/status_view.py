"""How `ernie-ops status` looks in a terminal: one table that fits 80 columns (a pipe gets rich's 80).

Seven short columns with paired values ("ok/ok", "0/1", "0.123s/0.456s"), no vertical rules, and
no wrapping inside a cell: a value is read whole or not at all. Wider terminals get the same table.
"""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ernie_ops.observe.status import InstanceStatus, Status

COLUMNS = ("port", "unit", "health", "nginx", "run/wait", "KV", "TTFT p50/p99")


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _seconds(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}s" if v < 10 else f"{v:.1f}s"


def _health(i: InstanceStatus) -> Text:
    """`/health` and `/v1/models` together: ok/ok, ok/wrong, down, foreign."""
    if i.foreign:
        return Text("foreign", style="bold red")
    if not i.healthy:
        return Text("down", style="red")
    model = {None: "-", True: "ok", False: "wrong"}[i.model_ok]
    return Text.assemble(("ok", "green"), "/", (model, "green" if i.model_ok else "red"))


def _pair(a: str, b: str) -> str:
    return "-" if a == b == "-" else f"{a}/{b}"


def table(st: Status) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False)
    for name in COLUMNS:
        t.add_column(name, no_wrap=True, justify="right" if name in ("port", "KV", "TTFT p50/p99", "run/wait") else "left")
    for i in st.instances:
        t.add_row(
            str(i.port),
            i.unit,
            _health(i),
            Text("◀", style="bold green") if i.routed else "",
            _pair(_num(i.running), _num(i.waiting)),
            _num(i.kv_cache_usage, "{:.1%}"),
            _pair(_seconds(i.ttft_p50), _seconds(i.ttft_p99)),
        )
    return t


def header(st: Status) -> Text:
    routed = "-" if st.routed_port is None else str(st.routed_port)
    if st.split:
        routed = " + ".join(f"{p} ({s:.0f}%)" for p, s in st.split.items())
    live = "" if st.live_port in (None, st.routed_port) else f" (nginx answers from {st.live_port})"
    code = "-" if st.gateway_health is None else str(st.gateway_health)
    if st.pool is not None:  # any replica may answer /health: no "answers from" to compare
        rotation = st.pool["in_rotation"]
        listed = ", ".join(map(str, rotation)) or "none"
        versions = st.pool.get("versions") or {}
        kinds = sorted(set(versions.values()))
        if len(kinds) > 1:  # mid-upgrade, or one that stopped half way
            listed += "  versions: " + "; ".join(f"{p} {v}" for p, v in sorted(versions.items()))
        elif kinds:
            listed += f"  on {kinds[0]}"
        return Text(f"gateway {st.gateway_url}  /health {code}  pool {len(rotation)} of {st.pool['size']} in rotation: {listed}")
    return Text(f"gateway {st.gateway_url}  /health {code}  routed {routed}{live}")


def last_change(st: Status) -> Text | None:
    lc = st.last_change
    if not lc:
        return None
    return Text(f"last change: {lc.get('at')} {lc.get('kind')} {lc.get('source')} -> {lc.get('target')}: {lc.get('outcome')}")


def rollout(st: Status) -> Text | None:
    r = st.rollout
    if not r:
        return None
    style = {"pass": "green", "fail": "red"}.get(r["verdict"] or "", "yellow")
    watcher = f"watched by pid {r['watcher_pid']}" if r["watched"] else "NOT WATCHED"
    text = Text.assemble(f"rollout: {r['what']}; {watcher}; verdict ", (r["verdict"] or "-", style))
    if r["verdict_detail"]:
        text.append(f" ({r['verdict_detail']})")
    return text


def launcher_says(st: Status) -> list[Text]:
    """For each instance that does not serve: what its launcher said last (a death, a start in progress)."""
    return [Text(f"{i.port} ({i.unit}): {i.says}", style="red" if i.unit == "failed" else "yellow") for i in st.instances if i.says]


def render(st: Status) -> list[RenderableType]:
    """What `ernie-ops status` prints on stdout, in order (problems go to stderr, one per line)."""
    parts: list[RenderableType] = [header(st), table(st), *launcher_says(st)]
    live = rollout(st)
    if live is not None:
        parts.append(live)
    change = last_change(st)
    if change is not None:
        parts.append(change)
    return parts
