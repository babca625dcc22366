"""The ERNIE Grafana dashboard, built with grafana-foundation-sdk (never hand-edited JSON).

    python -m grafana.dashboard > grafana/ernie-ops.json     # regenerate after an edit here

tests/unit/test_dashboard.py fails when the committed JSON differs from this file's output; the integration
tier runs every panel's query against a real Prometheus that scraped real vLLM under load. Per-instance panels
(legend host:port), filtered by the `host` and `port` variables. Cutover markers: an instance's start (a
cutover starts the spare; its vLLM process_start_time_seconds changes), until ernie-ops exports its own switches.
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

UID = "ernie-ops"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job="ernie-vllm", host=~"$host", port=~"$port"'
RATE = "$__rate_interval"
INSTANCE = "{{host}}:{{port}}"
API_RATE = f'sum by (host, port) (rate(http_requests_total{{{SEL}, handler=~"/v1/.+"}}[{RATE}]))'


def query(expr: str, legend: str = INSTANCE, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def quantiles(metric: str) -> list[prometheus.Dataquery]:
    rate = f"sum by (le, host, port) (rate({metric}_bucket{{{SEL}}}[{RATE}]))"
    levels = ((0.5, "A"), (0.95, "B"), (0.99, "C"))
    return [query(f"histogram_quantile({q}, {rate})", f"{INSTANCE} p{int(q * 100)}", ref) for q, ref in levels]


def series(title: str, unit: str, targets: list[prometheus.Dataquery], description: str) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).description(description).datasource(DS).height(8).span(12)
    for t in targets:
        panel = panel.with_target(t)
    return panel


PANELS: list[timeseries.Panel | stat.Panel] = [
    series(
        "Requests running / waiting",
        "short",
        [
            query(f"vllm:num_requests_running{{{SEL}}}", f"{INSTANCE} running"),
            query(f"vllm:num_requests_waiting{{{SEL}}}", f"{INSTANCE} waiting", "B"),
        ],
        "Waiting above zero for minutes: ErnieQueuePersistent.",
    ),
    series(
        "KV cache usage",
        "percentunit",
        [query(f"vllm:kv_cache_usage_perc{{{SEL}}}")],
        "A fraction of the KV cache blocks in use (1 = full). Above 0.95 for 5 minutes: ErnieKVCacheNearFull.",
    ),
    series(
        "Time to first token",
        "s",
        quantiles("vllm:time_to_first_token_seconds"),
        "p50/p95/p99 from the histogram's rate: what a streaming client waits before the first token.",
    ),
    series("Inter-token latency", "s", quantiles("vllm:inter_token_latency_seconds"), "p50/p95/p99 of the gaps between tokens."),
    series("End-to-end request latency", "s", quantiles("vllm:e2e_request_latency_seconds"), "p50/p95/p99 of whole requests."),
    series(
        "Tokens/s",
        "short",
        [
            query(f"sum by (host, port) (rate(vllm:generation_tokens_total{{{SEL}}}[{RATE}]))", f"{INSTANCE} generated"),
            query(f"sum by (host, port) (rate(vllm:prompt_tokens_total{{{SEL}}}[{RATE}]))", f"{INSTANCE} prompt", "B"),
        ],
        "Generated and prompt tokens per second.",
    ),
    series(
        "Finished requests by reason",
        "reqps",
        [
            query(
                f"sum by (host, port, finished_reason) (rate(vllm:request_success_total{{{SEL}}}[{RATE}]))",
                f"{INSTANCE} {{{{finished_reason}}}}",
            ),
        ],
        "stop, length, abort (the client went away), error: what ended each request.",
    ),
    series(
        "5xx share of API requests",
        "percentunit",
        [
            query(  # 0 while no 5xx series exists yet (vLLM creates it with the first 5xx)
                f'(sum by (host, port) (rate(http_requests_total{{{SEL}, handler=~"/v1/.+", status="5xx"}}[{RATE}]))'
                f" or {API_RATE} * 0) / {API_RATE}"
            ),
        ],
        "Empty while an instance has no traffic (nothing over nothing). Above 5% with 20+ requests: ErnieHigh5xxShare.",
    ),
    series(
        "Availability as a client sees it",
        "percentunit",
        [
            query(
                f'avg by (host, job) (avg_over_time(probe_success{{job=~"ernie-gateway-.+", host=~"$host"}}[{RATE}]))', "{{host}} {{job}}"
            ),
        ],
        "The blackbox exporter through nginx: GET /health and a one-token completion.",
    ),
    stat.Panel()
    .title("Instances up")
    .datasource(DS)
    .height(8)
    .span(12)
    .unit("short")
    .with_target(query(f"sum by (host) (up{{{SEL}}})", "{{host}}"))
    .description("Scraped instances answering /metrics; the spare of a cutover pair is down by design."),
    series(
        "Pool: requests/s and waiting per host",
        "short",
        [
            query(f"sum by (host) (rate(vllm:request_success_total{{{SEL}}}[{RATE}]))", "{{host}} requests/s"),
            query(f"sum by (host) (vllm:num_requests_waiting{{{SEL}}})", "{{host}} waiting", "B"),
        ],
        "A host's replicas together (each replica's own series are in the panels above, legend host:port). Waiting "
        "above zero on every replica: the pool is saturated (`ernie-ops status` says so); add replicas or a host.",
    ),
    stat.Panel()
    .title("Pool replicas in rotation")
    .datasource(DS)
    .height(8)
    .span(12)
    .unit("short")
    .with_target(query('ernie_ops_pool_replicas_in_rotation{host=~"$host"}', "{{host}} in rotation"))
    .with_target(query('ernie_ops_pool_replicas{host=~"$host"}', "{{host}} size", "B"))
    .description(
        "Written by the pool watch at every change (a pool host only): fewer in rotation than the size for 3 minutes "
        "fires ErniePoolDegraded; `ernie-ops status` names the replicas out and why."
    ),
    stat.Panel()
    .title("Routed port")
    .datasource(DS)
    .height(8)
    .span(12)
    .unit("none")
    .with_target(query('ernie_ops_routed_port{host=~"$host"}', "{{host}}"))
    .description("The instance nginx routes every request to, written by ernie-ops after each cutover; none during a canary split."),
]


def build() -> dict:
    host = (
        db.QueryVariable("host").label("Host").datasource(DS).query('label_values(up{job="ernie-vllm"}, host)')
        .multi(True).include_all(True).all_value(".+")
    )  # fmt: skip
    port = (
        db.QueryVariable("port").label("Port").datasource(DS).query('label_values(up{job="ernie-vllm", host=~"$host"}, port)')
        .multi(True).include_all(True).all_value(".+")
    )  # fmt: skip
    board = (
        db.Dashboard("ERNIE vLLM service")
        .uid(UID)
        .tags(["ernie-ops", "vllm"])
        .refresh("30s")
        .time("now-3h", "now")
        .with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(host)
        .with_variable(port)
    )
    # ernie-ops's own marks: a cutover or rollback ended (any outcome); instance starts include crash restarts
    cutovers = db.AnnotationQuery().name("Cutovers and rollbacks").datasource(DS).enable(True).icon_color("purple")
    board = board.annotation(cutovers.expr('changes(ernie_ops_cutover_last_timestamp_seconds{host=~"$host"}[2m]) > 0'))
    starts = db.AnnotationQuery().name("Instance starts").datasource(DS).enable(True).icon_color("orange")
    board = board.annotation(starts.expr(f"changes(process_start_time_seconds{{{SEL}}}[2m]) > 0"))
    for panel in PANELS:
        board = board.with_panel(panel)
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


if __name__ == "__main__":
    print(json.dumps(build(), indent=2, sort_keys=True))
