"""`ernie-ops copy batch INPUT -o OUTPUT [--channel C] [--concurrency N] [--posts N] [--max-chars N] [--json]`.

The posts of every product of a CSV/XLSX file (the work is marketing/commands). A rich progress bar on a terminal,
one plain line per row otherwise (logs, CI); a summary table at the end, or the summary as JSON with --json
(stdout holds only the JSON then).

Exit codes: 0 every row generated (or already in OUTPUT); 1 some rows failed on the gateway, were malformed,
or were not attempted after the gateway failed repeatedly (the summary says which, and that a re-run
continues); 2 usage or config problems (marketing/commands says which).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, bounded, subcommands
from ernie_ops.cli.console import err_console, out_console, plain, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # the types only: marketing.batch is imported when the command runs (see run_batch)
    from ernie_ops.marketing.batch import BatchProgress, BatchSummary


def _channel(text: str) -> str:
    from ernie_ops.marketing import channels  # lazy: +10 ms start-up (-X importtime); only --channel needs it

    found = channels.resolve(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"channel '{text}' is not one of {channels.names()}")
    return found


def register(sub: Subcommands) -> None:
    cp = sub.add_parser("copy", help="marketing copy (营销文案): posts for every product of a CSV/XLSX file")
    csub = subcommands(cp, "copy_command")
    b = csub.add_parser("batch", help="generate the posts of every row of INPUT into OUTPUT (.csv or .xlsx); a re-run continues")
    b.add_argument("input", metavar="INPUT", help="products file: CSV (UTF-8, BOM or GBK) or XLSX")
    b.add_argument("-o", "--output", required=True, metavar="OUTPUT", help="posts file, .csv or .xlsx (rows already in it are skipped)")
    b.add_argument(
        "--channel",
        type=_channel,
        help="moments|weibo|xiaohongshu (朋友圈|微博|小红书) when a row has none (default: chat.marketing.channel)",
    )
    b.add_argument("--concurrency", type=bounded("concurrency", 1, 256), help="rows at once (default: chat.marketing.batch_concurrency)")
    b.add_argument("--posts", type=bounded("posts", 1, 10), help="posts per product when its row has none (default: chat.marketing.posts)")
    b.add_argument(
        "--max-chars",
        type=bounded("max-chars", 5, 2000),
        help="a post's limit when its row has none (default: chat.marketing.max_chars, else the channel's)",
    )
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.set_defaults(func=run_batch)


def run_batch(args: argparse.Namespace) -> int:
    from ernie_ops.client.gateway import GatewayClient  # lazy, as the next: only copy needs them
    from ernie_ops.marketing import commands  # lazy: +55 ms start-up (-X importtime); only copy needs it

    cfg = config.load(args.config)
    input_path, output_path = Path(args.input), Path(args.output)
    commands.check_paths(input_path, output_path)
    mcfg = commands.batch_settings(cfg.chat.marketing, posts=args.posts, max_chars=args.max_chars, channel=args.channel)
    read = commands.read_products(input_path, output_path)
    for problem in read.problems:
        err_console.print(f"[yellow]skipped[/] {problem}", soft_wrap=True, markup=True, highlight=False)
    concurrency = args.concurrency or mcfg.batch_concurrency
    try:
        client = GatewayClient.from_config(cfg, os.environ)
        prompt = commands.system_prompt(cfg.chat.effective_scenarios())
        generate = functools.partial(commands.generate, client, prompt, mcfg, read, output_path, concurrency)
        summary = asyncio.run(_with_progress(generate, concurrency, args.json))
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the finished rows are in {output_path}; re-run the same command to continue.")
        raise
    if args.json:
        print_json(summary.as_dict(), indent=2, ensure_ascii=False)
    else:
        _print_summary(summary)
    return EXIT_OK if summary.ok else EXIT_FAILED


async def _with_progress(generate: Callable[[Callable[[BatchProgress], None]], Awaitable[BatchSummary]], concurrency: int, quiet: bool):
    """`generate(progress)` with its progress shown: a bar on a terminal, a line per row otherwise, nothing with --json."""
    if sys.stderr.isatty() and not quiet:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=err_console, transient=True) as bar:
            task = bar.add_task("copy batch", total=None)

            def on_progress(p: BatchProgress) -> None:
                failed = f" ({p.failed} failed)" if p.failed else ""
                bar.update(task, total=p.total, completed=p.done, description=f"copy batch{failed} {p.current[:30]}")

            return await generate(on_progress)

    def line_per_row(p: BatchProgress) -> None:
        if p.done:
            plain(f"[{p.done}/{p.total}] {p.current} (failed so far: {p.failed})", err=True)
        else:
            plain(f"copy batch: {p.total} row(s) to generate, concurrency {concurrency}", err=True)

    return await generate(line_per_row)


def _print_summary(s: BatchSummary) -> None:
    from rich.table import Table

    t = Table(title="ernie-ops copy batch", show_header=False)
    rows = [
        ("rows", f"{s.rows_total} in the file: {s.generated} generated, {s.resumed} already done, {len(s.failed_rows)} failed, "
                 f"{len(s.bad_rows)} malformed, {s.not_attempted} not attempted"),
        ("posts", f"{s.posts}: {s.posts_first_try_ok} ok on the first try, {s.posts_ok_after_regeneration} ok after regeneration, "
                  f"{s.posts_flagged} flagged"),
        ("requests", f"{s.requests} ({s.regenerations} regenerations)"),
        ("speed", f"{s.rows_per_minute:.1f} rows/min over {s.seconds:.1f} s"),
        ("output", s.output),
    ]  # fmt: skip
    for problem in s.bad_rows:
        rows.append(("malformed", str(problem)))
    for f in s.failed_rows[:20]:
        rows.append(("failed", f"row {f.row} ({f.product}): {f.message}"))
    if len(s.failed_rows) > 20:
        rows.append(("failed", f"... and {len(s.failed_rows) - 20} more"))
    for k, v in rows:
        t.add_row(k, escape(v))
    out_console.print(t)
    out_console.print(escape(s.verdict()), soft_wrap=True)
