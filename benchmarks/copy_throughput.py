"""Marketing-copy batch throughput vs `ernie-ops bench` at the same prompt/output lengths; prints tables, asserts nothing.

    ~/.cache/ernie-ops/venv/bin/python -m benchmarks.copy_throughput [--rows 200] [--concurrency 1,8,32] [--max-tokens 32]
                                                                     [--budget 600] [--model tiny|real]

One real vLLM instance (the tiny model, or with --model real SmolLM2-135M-Instruct in float32; CPU) behind the
project's nginx, as tests/integration does. For each concurrency C:
  batch  `run_batch` over a ROWS-row products file (synthetic products, 3 posts a row, the product's default
         chat.marketing settings except max_tokens) through the gateway with the real GatewayClient and
         CopyWriter: C rows at once, so up to 3 x C requests in flight. A fresh output file each time.
  bench  `ernie_ops.observe.bench.run` through the same gateway with as many requests, 3 x C streams (the same
         requests in flight), prompt_tokens = the copy prompt's token count (vLLM's /tokenize with the copy
         messages and the chat template), max_tokens the same as the batch's.
Output length: bench uses ignore_eos, so each bench request is exactly max_tokens. A copy request is
grammar-guided (response_format json_schema) and ends when the JSON closes; the tiny random model almost never
closes its string, so nearly every copy request also runs to max_tokens; the output tokens of both are counted
(the client's chunks for the batch, bench's own count) and the table gives tokens/s beside requests/min.
--no-structured runs the batch without response_format: the difference is the grammar's cost.
A level whose batch is not done after --budget seconds is cancelled; its rows/min are over the rows finished
(say so: "rows" shows finished/asked).

Then the quality line of the batch: posts within the limit on the first try, after regeneration, flagged, and
the regeneration count (the tiny model's text is noise; reported anyway, as the issue asks).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.models import MODELS
from ernie_ops.client.gateway import GatewayClient, ReplyStats, Timeouts
from ernie_ops.marketing import batch_io
from ernie_ops.marketing.batch import BatchSummary, run_batch
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import DEFAULT_SYSTEM_PROMPT, CopyRequest, CopyWriter, build_messages
from ernie_ops.observe import bench
from tests.conftest import free_port, write_config
from tests.harness import nginx, serve_proc

PRODUCTS = ["保温杯", "帆布包", "蓝牙耳机", "绿茶", "台灯", "跑鞋", "雨伞", "面膜", "机械键盘", "电动牙刷"]
POINTS = ["轻便耐用", "保温12小时", "降噪长续航", "明前采摘", "护眼无频闪", "轻量缓震", "抗风防晒", "补水保湿"]
AUDIENCES = ["上班族", "学生", "通勤族", "茶友", "跑者", "宝妈", "程序员"]


def products_file(path: Path, rows: int) -> Path:
    lines = ["product,selling_points,audience"]
    for i in range(rows):
        lines.append(f"{PRODUCTS[i % len(PRODUCTS)]} {i + 1}号,{POINTS[i % len(POINTS)]},{AUDIENCES[i % len(AUDIENCES)]}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def prompt_tokens(url: str, model: str, cfg: MarketingConfig, product: batch_io.Product) -> int:
    """Tokens of the first try's messages with the chat template, as vLLM counts them."""
    req = CopyRequest.from_product(product, cfg)
    messages = build_messages(DEFAULT_SYSTEM_PROMPT, req, 1, CopyWriter(None, cfg, complete=_never).rules(req))
    r = httpx.post(f"{url}/tokenize", json={"model": model, "messages": messages}, timeout=30)
    r.raise_for_status()
    return int(r.json()["count"])


def bench_prompt_tokens(url: str, model: str, target: int) -> int:
    """bench's `prompt_tokens` giving `target` real tokens: its prompt is "hi " x (n - 1), which this tokenizer may
    not count as one token a word."""
    n = 200
    r = httpx.post(f"{url}/tokenize", json={"model": model, "prompt": "hi " * (n - 1)}, timeout=30)
    r.raise_for_status()
    per_word = r.json()["count"] / (n - 1)
    return max(2, round(target / per_word) + 1)


async def _never(*_args, **_kwargs) -> str:
    raise AssertionError("not called")


class Counting:
    """The real client's complete, with a ReplyStats per request: output chunks (tokens) and finish reasons."""

    def __init__(self, client: GatewayClient):
        self.client, self.tokens, self.finish = client, 0, {}

    async def __call__(self, messages, max_tokens, temperature, stats=None, extra=None):
        stats = ReplyStats()
        try:
            return await self.client.complete(messages, max_tokens, temperature, stats, extra)
        finally:
            self.tokens += stats.tokens
            self.finish[stats.finish_reason] = self.finish.get(stats.finish_reason, 0) + 1


async def batch_level(url: str, model: str, read: batch_io.Read, out: Path, cfg: MarketingConfig, c: int, budget: float):
    client = GatewayClient(url, model, Timeouts(connect=5, read=120, reply=600))
    counting = Counting(client)
    writer = CopyWriter(client, cfg, DEFAULT_SYSTEM_PROMPT, complete=counting)
    t0 = time.perf_counter()
    task = asyncio.ensure_future(run_batch(read, out, writer, cfg, concurrency=c))
    try:
        summary: BatchSummary = await asyncio.wait_for(asyncio.shield(task), budget)
        cut = False
    except TimeoutError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cut = True
        summary = BatchSummary(output=str(out))
        finished, _ = batch_io.read_posts(out)
        summary.generated = len({p.key for p in finished})
        summary.posts = len(finished)
        summary.posts_first_try_ok = summary.posts_ok_after_regeneration = -1  # not known for a cut run
        summary.requests, summary.regenerations = writer.stats.requests, writer.stats.regenerations
    seconds = time.perf_counter() - t0
    await client.aclose()
    return summary, seconds, counting, cut


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds per batch level before it is cut")
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny", help="real: SmolLM2-135M-Instruct in float32")
    ap.add_argument("--no-structured", action="store_true", help="batch without response_format (the grammar's cost, by difference)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    cfg = MarketingConfig(max_tokens=args.max_tokens, structured_output=not args.no_structured)
    served = MODELS[args.model]
    model, name = served.directory(), served.served_name
    with tempfile.TemporaryDirectory(prefix="eo-copy-", dir="/var/tmp") as d:
        work = Path(d)
        work.chmod(0o755)
        port = free_port()
        sp = serve_proc.start(write_config(work / "ernie.yaml", model, [port], work / "cache", **served.sections), port, work)
        ng = nginx.prepare(work / "nginx", free_port(), port)
        try:
            sp.wait_ready()
            ng.start()
            read = batch_io.read_products(products_file(work / "products.csv", args.rows))
            ptoks = prompt_tokens(ng.url, name, cfg, read.rows[0])
            bench_ptoks = bench_prompt_tokens(ng.url, name, ptoks)
            print(f"model {name} ({args.model}); marketing prompt: this checkout's ernie_ops/marketing/generate.py", flush=True)
            print(f"bench prompt_tokens={bench_ptoks} (its 'hi ' prompt, about {ptoks} tokens with this tokenizer)", flush=True)
            print(f"copy prompt (first try, chat template): {ptoks} tokens; max_tokens {cfg.max_tokens}; {cfg.posts} posts a row, "
                  f"max_attempts {cfg.max_attempts}; structured output {cfg.structured_output}", flush=True)  # fmt: skip
            results = []
            for c in levels:
                summary, seconds, counting, cut = asyncio.run(
                    batch_level(ng.url, name, read, work / f"posts-c{c}.csv", cfg, c, args.budget)
                )
                n_requests = summary.requests
                spec = bench.BenchSpec(
                    url=ng.url, model=name, concurrency=c * cfg.posts, duration=None, count=n_requests,
                    prompt_tokens=bench_ptoks, max_tokens=cfg.max_tokens,
                )  # fmt: skip
                rep = bench.run(spec)
                if rep.errors:
                    print(f"  bench errors: {rep.errors}", flush=True)
                batch_rpm = n_requests * 60 / seconds
                bench_rpm = rep.ok * 60 / rep.seconds
                results.append((c, summary, seconds, counting, cut, rep, batch_rpm, bench_rpm))
                print(f"c={c}: batch {summary.generated} rows, {n_requests} requests in {seconds:.1f} s "
                      f"({counting.tokens / seconds:.0f} tok/s, finish {counting.finish}); "
                      f"bench {rep.ok} ok/{rep.failed} failed in {rep.seconds:.1f} s ({rep.output_tokens_per_s:.0f} tok/s)",
                      flush=True)  # fmt: skip
        finally:
            ng.stop()
            sp.stop()

    print()
    print(f"{'conc':>4} | {'rows':>9} | {'batch rows/min':>14} | {'batch req/min':>13} | {'bench req/min':>13} | {'ratio':>5} | "
          f"{'batch tok/s':>11} | {'bench tok/s':>11}")  # fmt: skip
    for c, summary, seconds, counting, cut, rep, batch_rpm, bench_rpm in results:
        rows = f"{summary.generated}/{args.rows}" + ("*" if cut else "")
        ratio = batch_rpm / bench_rpm if bench_rpm else float("nan")
        print(f"{c:>4} | {rows:>9} | {summary.generated * 60 / seconds:>14.1f} | {batch_rpm:>13.1f} | {bench_rpm:>13.1f} | "
              f"{ratio:>5.2f} | {counting.tokens / seconds:>11.0f} | {rep.output_tokens_per_s:>11.0f}")  # fmt: skip
    if any(r[4] for r in results):
        print(f"* cut after {args.budget:.0f} s: rows/min over the rows finished")
    print("ratio = batch requests/min / bench requests/min with bench at 3 x conc streams (the batch's requests in flight)")
    print()
    print("posts (per level): within the limit on the first try / after regeneration / flagged; regenerations")
    for c, summary, *_ in results:
        if summary.posts_first_try_ok < 0:
            print(f"  c={c}: {summary.posts} posts (cut run: shares not known); {summary.regenerations} regenerations")
            continue
        p = max(1, summary.posts)
        print(f"  c={c}: {summary.posts} posts: {summary.posts_first_try_ok / p:.1%} first try, "
              f"{summary.posts_ok_after_regeneration / p:.1%} after regeneration, {summary.posts_flagged / p:.1%} flagged; "
              f"{summary.regenerations} regenerations of {summary.requests} requests")  # fmt: skip


if __name__ == "__main__":
    main()
