"""`ernie-ops bench`: streaming load against the gateway (default) or one instance."""

from __future__ import annotations

import argparse
import os

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, port
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK, UsageError


def register(sub: Subcommands) -> None:
    b = sub.add_parser("bench", help="streaming load against the gateway (default) or one instance")
    target = b.add_mutually_exclusive_group()
    target.add_argument("--url", help="base URL (default: gateway.url from the config)")
    target.add_argument("--port", type=port, help="one instance on 127.0.0.1, bypassing nginx")
    b.add_argument("-c", "--concurrency", type=int, default=16)
    amount = b.add_mutually_exclusive_group()
    amount.add_argument("-d", "--duration", type=float, help="seconds of load (default 30)")
    amount.add_argument("-n", "--count", type=int, help="number of requests")
    b.add_argument("--prompt-tokens", type=int, default=512)
    b.add_argument("--max-tokens", type=int, default=256)
    b.add_argument("--processes", type=int, default=0, help="worker processes (default: by cores and concurrency)")
    b.add_argument("--rate", type=float, help="requests a second in all, evenly spaced (default: each stream back to back)")
    b.add_argument("--json", action="store_true", help="machine-readable report")
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ernie_ops.observe import bench  # lazy: +37 ms start-up (-X importtime); only bench needs it

    cfg = config.load(args.config)
    if args.concurrency < 1 or (args.count is not None and args.count < 1) or (args.duration is not None and args.duration <= 0):
        raise UsageError("concurrency, count and duration must be positive")
    if args.rate is not None and args.rate <= 0:
        raise UsageError(f"--rate {args.rate:g}: give the requests a second, more than 0")
    prompt, out = args.prompt_tokens, args.max_tokens
    budget = cfg.vllm.max_model_len - 8  # room for special tokens of the template
    if prompt + out > budget:
        out = min(out, budget // 2)
        prompt = budget - out
        err_console.print(
            f"[yellow]note:[/] {args.prompt_tokens} + {args.max_tokens} tokens exceed max_model_len "
            f"{cfg.vllm.max_model_len}: using {prompt} in / {out} out"
        )
    url = args.url or (f"http://127.0.0.1:{args.port}" if args.port else cfg.gateway.url)
    spec = bench.BenchSpec(
        url=url.rstrip("/"), model=cfg.model.served_name, concurrency=args.concurrency,
        duration=None if args.count else (args.duration or 30.0), count=args.count,
        prompt_tokens=prompt, max_tokens=out, api_key=os.environ.get("ERNIE_OPS_API_KEY"), processes=args.processes,
        ca_file=cfg.gateway.ca_file if url.startswith("https:") else None, rate=args.rate,
    )  # fmt: skip
    if args.json:
        report = bench.run(spec)
        print_json(report.as_dict(), indent=2)
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task(f"bench {url}: c={spec.concurrency}")
            report = bench.run(
                spec, on_progress=lambda ok, bad: bar.update(task, description=f"bench {url}: c={spec.concurrency} ok={ok} failed={bad}")
            )
        _print_bench(report)
    return EXIT_OK if report.failed == 0 and report.ok > 0 else EXIT_FAILED


def _print_bench(r) -> None:
    from rich.table import Table

    def ms(v):
        return "-" if v is None else f"{v * 1000:.1f} ms"

    t = Table(title="ernie-ops bench", show_header=False)
    rows = [
        ("requests", f"{r.requests} ({r.ok} ok, {r.failed} failed, {r.cut} cut mid-stream, {r.retried} retried before first byte)"),
        ("throughput", f"{r.qps:.1f} req/s, {r.output_tokens_per_s:.0f} output tokens/s over {r.seconds:.1f} s"),
        ("TTFT", f"mean {ms(r.ttft_mean)}, p50 {ms(r.ttft_p50)}, p99 {ms(r.ttft_p99)}"),
        ("end-to-end", f"p50 {ms(r.e2e_p50)}, p99 {ms(r.e2e_p99)}"),
        ("upstreams", ", ".join(f"{k}: {v}" for k, v in sorted(r.upstreams.items())) or "-"),
    ]
    if r.errors:
        rows.append(("errors", ", ".join(f"{k}: {v}" for k, v in r.errors.items())))
    for k, v in rows:
        t.add_row(k, v)
    out_console.print(t)
