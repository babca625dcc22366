"""Run N concurrent streaming completions and print one JSON summary line (used inside sandboxes).

Usage: python stream_client.py BASE_URL MODEL N MAX_TOKENS [STARTED_FILE]
STARTED_FILE is created once every stream has received its first chunk.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ernie_ops.client import sse


def stream_once(base: str, model: str, max_tokens: int, on_first_chunk=lambda: None) -> dict:
    """One streaming completion; what arrived, whether it ended properly, and any error."""
    body = {"model": model, "prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    chunks, reason, done, error = 0, None, False, None
    try:
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as r:
            r.raise_for_status()
            for data in sse.iter_data(r.iter_bytes()):
                event = sse.parse(data)
                if event is None:
                    done = True
                    break
                chunks += 1
                if chunks == 1:
                    on_first_chunk()
                reason = event["choices"][0].get("finish_reason") or reason
    except Exception as exc:  # reported to the caller, who asserts on it
        error = f"{type(exc).__name__}: {exc}"
    return {"chunks": chunks, "finish_reason": reason, "done": done, "error": error}


def one(base: str, model: str, max_tokens: int, out: list, i: int, started: threading.Barrier) -> None:
    out[i] = stream_once(base, model, max_tokens, on_first_chunk=started.wait)
    if out[i]["chunks"] == 0:
        started.abort()


def main() -> None:
    base, model, n, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    started_file = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    out: list = [None] * n
    started = threading.Barrier(n + 1)
    threads = [threading.Thread(target=one, args=(base, model, max_tokens, out, i, started)) for i in range(n)]
    for t in threads:
        t.start()
    try:
        started.wait(timeout=120)
        if started_file:
            started_file.write_text("started")
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
