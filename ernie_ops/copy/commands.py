"""`ernie-ops copy batch INPUT -o OUTPUT [--channel C] [--concurrency N] [--posts N] [--max-chars N] [--json]`.

--channel is where the posts are published (moments/weibo/xiaohongshu, or 朋友圈/微博/小红书) for the rows whose
channel column is empty or missing; default chat.marketing.channel. It brings the channel's length limit when
neither the row nor --max-chars gives one.

Generates the posts of every row of a products file (CSV/XLSX, copy/batch_io.py) through the config's chat
gateway (cfg.chat_gateway_url(), never a fixed instance), model cfg.model.served_name, API key from
$ERNIE_OPS_API_KEY when set. A rich progress bar on a terminal, one plain line per row otherwise (logs, CI);
a summary table at the end, or the summary as JSON with --json (stdout holds only the JSON then).

Exit codes: 0 every row generated (or already in OUTPUT); 1 some rows failed on the gateway, were malformed,
or were not attempted after the gateway failed repeatedly (the summary says which, and that a re-run
continues); 2 usage or config problems: an unreadable or malformed products file, an OUTPUT that exists and is
not a posts file (refused, never overwritten), OUTPUT the same file as INPUT, an output directory missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ernie_ops.errors import EXIT_FAILED, EXIT_OK, UsageError


def _bounded(name: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} '{text}' is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {value} is outside {low}..{high}")
        return value

    return parse


def _channel(text: str) -> str:
    from ernie_ops.copy import channels

    found = channels.resolve(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"channel '{text}' is not one of {channels.names()}")
    return found


def register(sub, parser_class) -> None:
    """Add the `copy` command group to the CLI's subparsers."""
    cp = sub.add_parser("copy", help="marketing copy (营销文案): posts for every product of a CSV/XLSX file")
    csub = cp.add_subparsers(dest="copy_command", required=True, parser_class=parser_class)
    b = csub.add_parser("batch", help="generate the posts of every row of INPUT into OUTPUT (.csv or .xlsx); a re-run continues")
    b.add_argument("input", metavar="INPUT", help="products file: CSV (UTF-8, BOM or GBK) or XLSX")
    b.add_argument("-o", "--output", required=True, metavar="OUTPUT", help="posts file, .csv or .xlsx (rows already in it are skipped)")
    b.add_argument(
        "--channel",
        type=_channel,
        help="moments|weibo|xiaohongshu (朋友圈|微博|小红书) when a row has none (default: chat.marketing.channel)",
    )
    b.add_argument("--concurrency", type=_bounded("concurrency", 1, 256), help="rows at once (default: chat.marketing.batch_concurrency)")
    b.add_argument("--posts", type=_bounded("posts", 1, 10), help="posts per product when its row has none (default: chat.marketing.posts)")
    b.add_argument(
        "--max-chars",
        type=_bounded("max-chars", 5, 2000),
        help="a post's limit when its row has none (default: chat.marketing.max_chars, else the channel's)",
    )
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.set_defaults(func=cmd_copy_batch)


def check_paths(input_path: Path, output_path: Path) -> None:
    """Usage problems found before reading anything: UsageError with one sentence."""
    if output_path.suffix.lower() not in (".csv", ".xlsx"):
        raise UsageError(f"Output file {output_path} must end in .csv or .xlsx, which decides its format.")
    if not output_path.parent.is_dir():
        raise UsageError(f"The directory of output file {output_path} does not exist; create it or choose another output.")
    same = input_path.resolve() == output_path.resolve()
    if not same and input_path.exists() and output_path.exists():
        same = os.path.samefile(input_path, output_path)
    if same:
        raise UsageError(f"Output {output_path} is the products file itself; write the posts to another file (-o posts.csv).")


def system_prompt(cfg) -> str:
    """The system prompt of the chat's copy scenario (tool: copy), so the CLI writes as the chat does."""
    from ernie_ops.copy.generate import DEFAULT_SYSTEM_PROMPT

    for scenario in cfg.chat.effective_scenarios():
        if scenario.tool == "copy":
            return scenario.system_prompt
    return DEFAULT_SYSTEM_PROMPT


def batch_settings(marketing, args: argparse.Namespace):
    """chat.marketing with the command line's --posts, --max-chars and --channel in place of its defaults;
    --max-chars is for every row without its own, whatever its channel (channel_max_chars is set aside)."""
    given = (("posts", args.posts), ("max_chars", args.max_chars), ("channel", args.channel))
    updates = {k: v for k, v in given if v is not None}
    if args.max_chars is not None:
        updates["channel_max_chars"] = {}
    return marketing.model_copy(update=updates)


def cmd_copy_batch(args: argparse.Namespace) -> int:
    from ernie_ops import config
    from ernie_ops.cli import err_console, out_console
    from ernie_ops.copy import batch_io

    cfg = config.load(args.config)
    input_path, output_path = Path(args.input), Path(args.output)
    check_paths(input_path, output_path)
    mcfg = batch_settings(cfg.chat.marketing, args)
    try:
        read = batch_io.read_products(input_path)
        batch_io.read_posts(output_path)  # refuses an existing file that is not a posts file, before any request
    except batch_io.BatchFileError as e:
        raise UsageError(str(e)) from None
    for problem in read.problems:
        err_console.print(f"[yellow]skipped[/] {problem}", soft_wrap=True, markup=True, highlight=False)
    concurrency = args.concurrency or mcfg.batch_concurrency
    try:
        summary = asyncio.run(_run(cfg, mcfg, read, output_path, concurrency, args.json))
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the finished rows are in {output_path}; re-run the same command to continue.")
        raise
    if args.json:
        import json

        print(json.dumps(summary.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print_summary(summary, out_console)
    return EXIT_OK if summary.ok else EXIT_FAILED


async def _run(cfg, mcfg, read, output_path: Path, concurrency: int, quiet: bool):
    from ernie_ops.chat.client import GatewayClient
    from ernie_ops.cli import err_console
    from ernie_ops.copy.batch import run_batch
    from ernie_ops.copy.generate import CopyWriter

    client = GatewayClient.from_config(cfg, os.environ)
    writer = CopyWriter(client, mcfg, system_prompt(cfg))  # at most DEFAULT_MAX_IN_FLIGHT requests at once
    try:
        if sys.stderr.isatty() and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
            with Progress(*columns, console=err_console, transient=True) as bar:
                task = bar.add_task("copy batch", total=None)

                def on_progress(p) -> None:
                    failed = f" ({p.failed} failed)" if p.failed else ""
                    bar.update(task, total=p.total, completed=p.done, description=f"copy batch{failed} {p.current[:30]}")

                return await run_batch(read, output_path, writer, mcfg, concurrency=concurrency, progress=on_progress)

        def plain(p) -> None:
            if p.done:
                print(f"[{p.done}/{p.total}] {p.current} (failed so far: {p.failed})", file=sys.stderr, flush=True)
            else:
                print(f"copy batch: {p.total} row(s) to generate, concurrency {concurrency}", file=sys.stderr, flush=True)

        return await run_batch(read, output_path, writer, mcfg, concurrency=concurrency, progress=plain)
    finally:
        await client.aclose()


def _print_summary(s, console) -> None:
    from rich.markup import escape
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
    console.print(t)
    console.print(escape(s.verdict()), soft_wrap=True)
