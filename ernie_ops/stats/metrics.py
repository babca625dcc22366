"""vLLM's /metrics as a typed snapshot (parsed with prometheus_client.parser, never by hand)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Snapshot:
    running: float
    waiting: float
    kv_cache_usage: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    requests_ok: float

    @property
    def in_flight(self) -> float:
        return self.running + self.waiting

    def as_dict(self) -> dict:
        return asdict(self)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile on cumulative (upper bound, count) buckets; None without data."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def parse(text: str) -> Snapshot:
    """Sum over engines/models (one model per instance here)."""
    gauges: dict[str, float] = {}
    ttft: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
                gauges[s.name] = gauges.get(s.name, 0.0) + s.value
            elif s.name == "vllm:request_success_total":
                gauges["ok"] = gauges.get("ok", 0.0) + s.value
            elif s.name == "vllm:time_to_first_token_seconds_bucket":
                bound = float(s.labels["le"])
                ttft[bound] = ttft.get(bound, 0.0) + s.value
    buckets = list(ttft.items())
    return Snapshot(
        running=gauges.get("vllm:num_requests_running", 0.0),
        waiting=gauges.get("vllm:num_requests_waiting", 0.0),
        kv_cache_usage=gauges.get("vllm:kv_cache_usage_perc"),
        ttft_p50=histogram_quantile(0.5, buckets),
        ttft_p99=histogram_quantile(0.99, buckets),
        requests_ok=gauges.get("ok", 0.0),
    )


def fetch(client: httpx.Client, base: str, timeout: float) -> str:
    """An instance's /metrics text; httpx.HTTPError when it does not answer 200 (status, top, the canary gate)."""
    r = client.get(f"{base}/metrics", timeout=timeout)
    r.raise_for_status()
    return r.text


def snapshot(base: str, timeout: float = 5.0, client: httpx.Client | None = None) -> Snapshot:
    own = client is None
    client = client or httpx.Client()
    try:
        return parse(fetch(client, base, timeout))
    finally:
        if own:
            client.close()
