"""What the chat backend tests read: a Sink that keeps what the browser would show (`Recorder`), and the
engine's own request/token counters from its /metrics, read once nothing runs (`settled_counters`).
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families


class Recorder:
    """A Sink that keeps what the browser would show."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.final: str | None = None
        self.source: str | None = None
        self.sources: list = []
        self.said: list[str] = []
        self.failed: list[str] = []

    async def token(self, piece: str) -> None:
        self.tokens.append(piece)

    async def finish(self, text: str, sources: list) -> None:
        self.final, self.sources = text, sources
        self.source = next((s.text for s in sources if s.display == "inline"), None)

    async def say(self, text: str) -> None:
        self.said.append(text)

    async def fail(self, text: str) -> None:
        self.failed.append(text)

    async def stopped(self) -> None:
        self.said.append("(stopped)")


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
