"""grafana/ernie-ops.json is exactly what grafana/dashboard.py builds (grafana-foundation-sdk), and its panels
are the per-instance ones an operator needs; the integration tier runs every query against real data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from grafana import dashboard

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "grafana" / "ernie-ops.json"


def test_the_committed_json_is_the_builders_output():
    built = json.dumps(dashboard.build(), indent=2, sort_keys=True) + "\n"
    assert COMMITTED.read_text() == built, "grafana/ernie-ops.json is stale: python -m grafana.dashboard > grafana/ernie-ops.json"


def test_every_panel_queries_prometheus_per_instance():
    board = dashboard.build()
    titles = [p["title"] for p in board["panels"]]
    for needed in ("Requests running / waiting", "KV cache usage", "Time to first token", "Inter-token latency",
                   "End-to-end request latency", "Tokens/s", "Finished requests by reason", "5xx share of API requests",
                   "Availability as a client sees it", "Pool replicas in rotation",
                   "Pool: requests/s and waiting per host"):  # fmt: skip
        assert needed in titles, titles
    for title, expr in dashboard.panel_queries(board):
        assert 'host=~"$host"' in expr, (title, expr)
    latency = [e for t, e in dashboard.panel_queries(board) if t == "Time to first token"]
    assert [re.search(r"histogram_quantile\(([0-9.]+)", e).group(1) for e in latency] == ["0.5", "0.95", "0.99"]
    marks = [a["expr"] for a in board["annotations"]["list"]]
    assert [m.split("{")[0] for m in marks] == ["changes(ernie_ops_cutover_last_timestamp_seconds", "changes(process_start_time_seconds"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "host", "port"}


def test_the_provisioning_files_point_at_the_dashboard():
    ds = yaml.safe_load((ROOT / "grafana/provisioning/datasources/ernie-ops.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
    dash = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/ernie-ops.yml").read_text())
    assert dash["providers"][0]["type"] == "file" and dash["providers"][0]["options"]["path"]
