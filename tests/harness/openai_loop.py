"""A client that never retries (official `openai`, max_retries=0), streaming completions until SIGTERM/SIGINT.

Usage: python openai_loop.py BASE_URL MODEL THREADS [--ca FILE] [--max-tokens N] [--timeout S] [--rate R] [--gate FILE]
  -> prints {"ok": N, "failed": N, "cut": N, "errors": [...], "by_gateway": {ADDR: {"ok": N, "failed": N}},
             "by_upstream": {ADDR: N}}
`cut`: a stream that ended without its finish_reason. `by_gateway`: which gateway an edge sent each stream to
(its X-Ernie-Gateway header; "-" without an edge or before any header), so a test can tell whose streams failed.
`by_upstream`: which instance a gateway sent each finished stream to (its X-Ernie-Upstream header).
`--rate`: at most R requests a second in all, evenly spaced (0: each thread starts the next as soon as one ends).
`--gate`: a request starts only while FILE exists (tests/harness/load_windows.py opens it for the moments of a
cutover that matter); streams running when it closes finish.
Paced is the default of the tests' loads: back to back, even one thread keeps an engine busy and burns 1.8 of the
machine's 2 cores for as long as it runs (measured: 36 CPU-s of the engine's processes in 20 s, 1 to 4 threads alike),
which starved the other lane and the operation under test; paced, requests still overlap every moment of a switch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import threading
import time

import httpx
import openai


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("model")
    ap.add_argument("threads", type=int)
    ap.add_argument("--ca", help="verify an https gateway's certificate with this CA file")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=0.0, help="requests a second in all (0: back to back)")
    ap.add_argument("--gate", help="start requests only while this file exists")
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    http = httpx.Client(verify=ssl.create_default_context(cafile=args.ca) if args.ca else True, timeout=args.timeout)
    client = openai.OpenAI(base_url=f"{args.base}/v1", api_key="none", max_retries=0, http_client=http)
    lock = threading.Lock()
    res: dict = {"ok": 0, "failed": 0, "cut": 0, "errors": [], "by_gateway": {}, "by_upstream": {}}

    def count(gateway: str, key: str, error: str | None = None, upstream: str = "-") -> None:
        with lock:
            res[key] += 1
            per = res["by_gateway"].setdefault(gateway, {"ok": 0, "failed": 0})
            per["ok" if key == "ok" else "failed"] += 1
            if key == "ok":
                res["by_upstream"][upstream] = res["by_upstream"].get(upstream, 0) + 1
            if error:
                res["errors"].append(error[:200])

    def closed() -> bool:
        return args.gate is not None and not os.path.exists(args.gate)

    def loop(k: int) -> None:
        due = None  # thread k's next slot: all threads' slots evenly spaced, restarted after a closed gate (no burst)
        while not stop.is_set():
            if closed():
                due = None
                stop.wait(0.2)
                continue
            if args.rate > 0:
                now = time.monotonic()
                due = now + k / args.rate if due is None else due
                if due > now and stop.wait(due - now):
                    break
                due = max(due, now) + args.threads / args.rate
            gateway, upstream, finished = "-", "-", False
            try:
                raw = client.completions.with_raw_response.create(model=args.model, prompt="Hello", max_tokens=args.max_tokens, stream=True)
                gateway, upstream = raw.headers.get("x-ernie-gateway", "-"), raw.headers.get("x-ernie-upstream", "-")
                for chunk in raw.parse():
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finished = True
            except Exception as exc:  # an OpenAIError, or anything else: counted, never a thread that dies unseen
                count(gateway, "failed", repr(exc))
                continue
            count(gateway, "ok" if finished else "cut", upstream=upstream)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(args.threads)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.2)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
