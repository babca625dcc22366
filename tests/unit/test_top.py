"""`ernie-ops top`'s frames from real vLLM metric text (the same template as test_canary_gate), on a fake
clock: numbers are deltas over the window, never lifetime totals."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from ernie_ops import config
from ernie_ops.observe import top, top_view
from tests.harness.vllm_metrics import METRICS

GAUGES = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.25
"""


def text(fast=0, total=0, ok=0, error=0, start=1000.0, running=1) -> str:
    """`fast` requests with TTFT <= 0.1 s of `total`; the rest slower."""
    return METRICS.format(a=fast, b=total, ok=ok, abort=0, error=error, start=start) + GAUGES.format(running=running)


class Feed:
    def __init__(self, texts: dict[int, list[str | None]]):
        self.texts, self.now = texts, 0.0

    def scrape(self, port: int) -> str | None:
        return self.texts[port].pop(0)

    def clock(self) -> float:
        return self.now


@pytest.fixture
def cfg(tmp_path: Path) -> config.Config:
    return config.parse(f"instances: [{{port: 8000}}, {{port: 8001}}]\ngateway:\n  access_log: null\npaths:\n  state_dir: {tmp_path}\n")


def run(cfg, feed: Feed, times: list[float], window: float = 10.0) -> top.Frame:
    s = top.Sampler(cfg, window, feed.scrape, feed.clock)
    for t in times:
        feed.now = t
        s.sample()
    return s.frame({8000: 100.0})


def test_rates_and_quantiles_cover_the_window_not_the_lifetime(cfg):
    # 1000 slow requests before the window; 20 fast ones in it, 2 of them failed
    feed = Feed({8000: [text(0, 1000, ok=1000), text(20, 1020, ok=1018, error=2)], 8001: [None, None]})
    f = run(cfg, feed, [0.0, 10.0])
    a, b = f.instances
    assert a.up and a.share == 100.0 and a.requests == 20 and a.rps == pytest.approx(2.0)
    assert a.ttft_p99 is not None and a.ttft_p99 <= 0.1  # the lifetime p99 would be in the slow bucket
    assert a.error_share == pytest.approx(0.1) and a.running == 1 and a.kv_cache == 0.25
    assert not b.up and b.note == "does not answer /metrics" and b.share is None


def test_old_scrapes_leave_the_window(cfg):
    feed = Feed({8000: [text(0, 0), text(100, 100, ok=100), text(110, 110, ok=110)], 8001: [None] * 3})
    f = run(cfg, feed, [0.0, 5.0, 16.0])  # the window starts at the newest scrape at least 10 s old: t=5
    assert f.instances[0].seconds == pytest.approx(11.0) and f.instances[0].requests == 10


def test_a_restart_in_the_window_is_said_not_read_as_negative_traffic(cfg):
    feed = Feed({8000: [text(50, 50, ok=50), text(3, 3, ok=3, start=2000.0)], 8001: [None, None]})
    f = run(cfg, feed, [0.0, 1.0])
    assert f.instances[0].rps is None and f.instances[0].note.startswith("restarted")


def test_the_frame_fits_80_columns(cfg):
    feed = Feed({8000: [text(0, 0), text(20, 20, ok=20)], 8001: [None, None]})
    console = Console(width=80, record=True)
    console.print(top_view.render(run(cfg, feed, [0.0, 1.0])))
    out = console.export_text()
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "8000" in out and "20.0" in out and "down" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["top", "--json"], "--json prints one frame: use it with --once"),
        (["top", "--interval", "5", "--window", "2"], "--interval at most --window"),
    ],
)
def test_top_mistakes_are_sentences(tmp_path, capsys, argv, said):
    from ernie_ops import cli

    cfg_file = tmp_path / "ernie.yaml"
    cfg_file.write_text("gateway:\n  url: http://127.0.0.1:9\n")
    assert cli.main(["--config", str(cfg_file), *argv]) == 2
    assert said in capsys.readouterr().err


def test_a_pool_shows_each_replica_its_share_and_the_pools_total(tmp_path):
    """A pool's replicas in rotation share the gateway evenly, one marked down shows `out`, and a total row adds up
    what the replicas in rotation serve (issue 33: `top` per replica and for the pool)."""
    from ernie_ops.traffic import gateway

    upstream = tmp_path / "upstream.conf"
    upstream.write_text(gateway.render_pool([8000, 8001, 8002], down=frozenset({8002})))
    c = config.parse(
        "pool: {replicas: 3}\ninstances: [{port: 8000, slot: 0}, {port: 8001, slot: 1}, {port: 8002, slot: 2}]\n"
        f"gateway:\n  access_log: null\n  upstream_file: {upstream}\npaths:\n  state_dir: {tmp_path}\n"
    )
    shares, problem = top.routed_shares(c)
    assert shares == {8000: 50.0, 8001: 50.0} and problem is None
    feed = Feed({
        8000: [text(0, 0), text(20, 20, ok=20, running=3)], 8001: [text(0, 0), text(10, 10, ok=10, running=2)],
        8002: [text(0, 0), text(0, 0)],
    })  # fmt: skip
    s = top.Sampler(c, 10.0, feed.scrape, feed.clock)
    for t in (0.0, 10.0):
        feed.now = t
        s.sample()
    f = s.frame(shares)
    pool = f.total()
    assert f.pool == 3 and pool.rps == pytest.approx(3.0) and pool.running == 5 and pool.share == 100.0
    assert pool.note == "2 of 3 replicas in rotation"
    console = Console(width=80, record=True)
    console.print(top_view.render(f))
    shown = console.export_text()
    rows = {line.split()[0]: line.split() for line in shown.splitlines() if line.strip().split()[:1] in (["8002"], ["pool"])}
    assert rows["8002"][1] == "out" and rows["pool"][1:4] == ["100%", "3.0", "5/0"], shown
    assert "pool: 2 of 3 replicas in rotation" in shown and max(map(len, shown.splitlines())) <= 80
    assert top.Sampler(config.parse("instances: [{port: 8000}]\n"), 10.0, feed.scrape, feed.clock).frame({}).total() is None
