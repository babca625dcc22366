"""Threads of the official openai client (max_retries=0), each sending short completions on its own kept-alive
connection from one pool, while `during()` runs (a reload, a switch, a renewal): what a client that never retries
sees of it. Used by the gateway and edge tests and by benchmarks/reload_race.py."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import openai

from tests.harness.tiny_model import SERVED_NAME


def load(url: str, during: Callable[[], None], threads: int = 8, ca: Path | None = None) -> dict:
    """{"ok": N, "failed": N, "errors": [repr, ...]} of the requests sent to `url` while `during()` ran; `ca`: verify
    an https gateway's certificate with it."""
    verify = ssl.create_default_context(cafile=str(ca)) if ca else True
    http = httpx.Client(verify=verify, timeout=30, limits=httpx.Limits(max_keepalive_connections=threads))
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, http_client=http)
    stop, lock = threading.Event(), threading.Lock()
    res: dict = {"ok": 0, "failed": 0, "errors": []}

    def loop() -> None:
        while not stop.is_set():
            try:
                api.completions.create(model=SERVED_NAME, prompt="Hi", max_tokens=2)
                with lock:
                    res["ok"] += 1
            except openai.OpenAIError as exc:
                with lock:
                    res["failed"] += 1
                    res["errors"].append(repr(exc))

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for t in workers:
        t.start()
    try:
        during()
    finally:
        stop.set()
        for t in workers:
            t.join(timeout=60)
        http.close()
    return res
