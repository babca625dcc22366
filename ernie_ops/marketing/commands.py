"""The work of `ernie-ops copy batch INPUT -o OUTPUT` (ernie_ops/cli/copy.py parses, shows progress and prints).

Generates the posts of every row of a products file (CSV/XLSX, marketing/batch_io.py) through the client the CLI
builds from the config (the chat gateway, never a fixed instance; API key from $ERNIE_OPS_API_KEY when set), with
the system prompt of the chat's copy scenario. --channel is where the posts are published for the rows whose channel column is
empty or missing; default chat.marketing.channel. It brings the channel's length limit when neither the row
nor --max-chars gives one.

Usage problems (exit 2) are UsageErrors: an unreadable or malformed products file, an OUTPUT that exists and
is not a posts file (refused, never overwritten), OUTPUT the same file as INPUT, an output directory missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ernie_ops.client.gateway import GatewayClient
from ernie_ops.errors import UsageError
from ernie_ops.marketing import batch_io
from ernie_ops.marketing.batch import BatchProgress, BatchSummary, run_batch
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import DEFAULT_SYSTEM_PROMPT, CopyWriter


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


def read_products(input_path: Path, output_path: Path) -> batch_io.Read:
    """The products of INPUT, after checking that OUTPUT is absent or a posts file (before any request)."""
    try:
        read = batch_io.read_products(input_path)
        batch_io.read_posts(output_path)  # refuses an existing file that is not a posts file, before any request
    except batch_io.BatchFileError as e:
        raise UsageError(str(e)) from None
    return read


def system_prompt(scenarios: Iterable) -> str:
    """The system prompt of the chat's copy scenario (tool: copy; `scenarios`: chat.effective_scenarios()), so the
    CLI writes as the chat does."""
    for scenario in scenarios:
        if scenario.tool == "copy":
            return scenario.system_prompt
    return DEFAULT_SYSTEM_PROMPT


def batch_settings(marketing: MarketingConfig, *, posts: int | None, max_chars: int | None, channel: str | None) -> MarketingConfig:
    """chat.marketing with the command line's --posts, --max-chars and --channel in place of its defaults;
    --max-chars is for every row without its own, whatever its channel (channel_max_chars is set aside)."""
    given = (("posts", posts), ("max_chars", max_chars), ("channel", channel))
    updates = {k: v for k, v in given if v is not None}
    if max_chars is not None:
        updates["channel_max_chars"] = {}
    return marketing.model_copy(update=updates)


async def generate(
    client: GatewayClient,
    prompt: str,
    mcfg: MarketingConfig,
    read: batch_io.Read,
    output_path: Path,
    concurrency: int,
    progress: Callable[[BatchProgress], None],
) -> BatchSummary:
    """Every row's posts into `output_path` through `client` (closed at the end), `progress` told after each row."""
    writer = CopyWriter(client, mcfg, prompt)  # at most DEFAULT_MAX_IN_FLIGHT requests at once
    try:
        return await run_batch(read, output_path, writer, mcfg, concurrency=concurrency, progress=progress)
    finally:
        await client.aclose()
