"""How `ernie-ops top` looks: one table per frame that fits 80 columns, like `status`."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ernie_ops.observe.top import Frame

COLUMNS = ("port", "nginx", "req/s", "run/wait", "KV", "TTFT p50/p99", "ITL p50", "errors")


def _s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


def render(f: Frame) -> RenderableType:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False)
    for name in COLUMNS:
        t.add_column(name, no_wrap=True, justify="left" if name == "nginx" else "right")
    notes = []
    for i in f.instances:
        routed = ("out" if f.pool else "-") if i.share is None else ("◀" if i.share >= 99.5 else f"{i.share:.0f}%")
        if not i.up:
            t.add_row(str(i.port), routed, Text("down", style="red"), "-", "-", "-", "-", "-")
        else:
            err = "-" if i.error_share is None else f"{i.error_share:.1%}"
            t.add_row(
                str(i.port), routed, "-" if i.rps is None else f"{i.rps:.1f}", f"{i.running or 0:.0f}/{i.waiting or 0:.0f}",
                "-" if i.kv_cache is None else f"{i.kv_cache:.0%}", f"{_s(i.ttft_p50)}/{_s(i.ttft_p99)}", _s(i.itl_p50),
                Text(err, style="red" if (i.error_share or 0) > 0 else ""),
            )  # fmt: skip
        if i.note and i.up:
            notes.append(f"{i.port}: {i.note}")
    if (pool := f.total()) is not None:
        t.add_section()
        t.add_row(
            "pool", f"{pool.share:.0f}%" if pool.share is not None else "-", "-" if pool.rps is None else f"{pool.rps:.1f}",
            f"{pool.running or 0:.0f}/{pool.waiting or 0:.0f}", "-", "-", "-", "-",
        )  # fmt: skip
        notes.insert(0, f"pool: {pool.note}")
    head = Text(f"gateway {f.gateway_url}  window {f.window_seconds:g}s  (q quits)")
    parts: list[RenderableType] = [head, t]
    if f.problem:
        parts.append(Text(f.problem, style="red"))
    parts.extend(Text(n, style="yellow") for n in notes)
    return Group(*parts)


def live(frames, console) -> None:
    """Redraw each frame in place until `q` (or Ctrl-C); keys are read without echo when stdin is a terminal."""
    import select
    import sys
    import termios
    import tty

    from rich.live import Live

    tty_in = sys.stdin.isatty()
    saved = termios.tcgetattr(sys.stdin) if tty_in else None
    try:
        if tty_in:
            tty.setcbreak(sys.stdin.fileno())
        with Live(console=console, auto_refresh=False, transient=False) as view:
            for frame in frames:
                view.update(render(frame), refresh=True)
                if tty_in and select.select([sys.stdin], [], [], 0)[0] and sys.stdin.read(1) in ("q", "Q"):
                    return
    except KeyboardInterrupt:
        return
    finally:
        if saved is not None:
            termios.tcsetattr(sys.stdin, termios.TCSADRAIN, saved)
