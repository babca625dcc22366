"""A client that never retries (official `openai`, max_retries=0), looping until SIGTERM/SIGINT.

Usage: python openai_loop.py BASE_URL MODEL THREADS   -> prints {"ok": N, "failed": N, "errors": [...]}
"""

from __future__ import annotations

import json
import signal
import sys
import threading

import openai


def main() -> None:
    base, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    lock = threading.Lock()
    res: dict = {"ok": 0, "failed": 0, "errors": []}

    def loop() -> None:
        while not stop.is_set():
            try:
                for _ in client.completions.create(model=model, prompt="Hello", max_tokens=16, stream=True):
                    pass
                with lock:
                    res["ok"] += 1
            except openai.OpenAIError as exc:
                with lock:
                    res["failed"] += 1
                    res["errors"].append(repr(exc)[:200])

    threads = [threading.Thread(target=loop) for _ in range(n)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.2)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
