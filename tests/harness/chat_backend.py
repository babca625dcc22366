"""What the chat backend tests read: a Sink that keeps what the browser would show (`Recorder`, from recording_sink), and the
engine's own request/token counters from its /metrics, read once nothing runs (`settled_counters`).
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.recording_sink import Recorder

__all__ = ["Recorder", "engine_counters", "settled_counters"]


def engine_counters(port: int) -> dict[str, float]:
    """Requests finished (any reason), tokens generated and requests running, from the instance's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {"finished": 0.0, "generated": 0.0, "running": 0.0}
    names = {"vllm:request_success_total": "finished", "vllm:generation_tokens_total": "generated", "vllm:num_requests_running": "running"}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names:
                out[names[s.name]] += s.value
    return out


def settled_counters(port: int, timeout: float = 20) -> dict[str, float]:
    """The counters once nothing runs and two reads 0.5 s apart agree: vLLM records a finished request's
    stats after it has sent the last chunk, so a read right after an earlier test's reply can be stale."""
    deadline = time.monotonic() + timeout
    last = engine_counters(port)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = engine_counters(port)
        if now == last and now["running"] == 0:
            return now
        last = now
    raise AssertionError(f"the engine did not settle within {timeout}s: {last}")
