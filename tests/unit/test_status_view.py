"""`ernie-ops status` at 80 columns (a small terminal, or a pipe: rich's default width there is 80)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ernie_ops.observe import status_view
from ernie_ops.observe.status import InstanceStatus, Status


def widest() -> Status:
    """The longest value each cell can hold in practice, on both rows."""
    return Status(
        gateway_url="http://127.0.0.1:80",
        routed_port=8000,
        live_port=8000,
        gateway_health=200,
        instances=[
            InstanceStatus(
                port=8000, unit="deactivating", healthy=True, model_ok=False, running=128, waiting=1024,
                kv_cache_usage=1.0, ttft_p50=0.123, ttft_p99=12.345, routed=True,
            ),
            InstanceStatus(port=65535, unit="inactive", healthy=False, foreign=True, holder="pid 4242 python3"),
        ],
        last_change={"at": "2026-12-01T23:37:03Z", "kind": "cutover", "source": 8001, "target": 8000, "outcome": "ok"},
        problems=["8000 does not serve ernie-tiny"],
    )  # fmt: skip


def render(st: Status, width: int, terminal: bool) -> list[str]:
    buf = io.StringIO()
    console = Console(width=width, file=buf, force_terminal=terminal, color_system=None, highlight=False)
    for part in status_view.render(st):
        console.print(part)
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("terminal", [False, True])
def test_every_line_fits_and_every_value_is_whole(terminal):
    lines = render(widest(), 80, terminal)
    print("\n".join(lines))
    assert max(len(line) for line in lines) <= 80
    rows = {line.split()[0]: line for line in lines if line.strip() and line.split()[0] in ("8000", "65535")}
    for value in ("8000", "deactivating", "ok/wrong", "◀", "128/1024", "100.0%", "0.123s/12.3s"):
        assert value in rows.get("8000", "").split(), (value, lines)
    for value in ("65535", "inactive", "foreign"):
        assert value in rows.get("65535", "").split(), (value, lines)
    header = next(line for line in lines if "port" in line)
    for name in status_view.COLUMNS:
        assert name in header, name
    assert any("last change: 2026-12-01T23:37:03Z cutover 8001 -> 8000: ok" in line for line in lines)


def test_gateway_line_names_the_route_and_a_pending_reload():
    st = widest()
    st.live_port = 8001
    assert render(st, 80, False)[0] == "gateway http://127.0.0.1:80  /health 200  routed 8000 (nginx answers from 8001)"


def test_an_instance_without_metrics_shows_dashes():
    st = widest()
    st.instances = [InstanceStatus(port=8001, unit="failed", healthy=False)]
    row = next(line for line in render(st, 80, False) if line.startswith("8001"))
    assert row.split() == ["8001", "failed", "down", "-", "-", "-"]
