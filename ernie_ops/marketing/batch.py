"""A marketing-copy batch: every row of a products file through a `CopyWriter`, bounded, resumable.

- Bounded concurrency: `concurrency` workers take rows in file order; each row's posts are themselves requested
  concurrently (CopyWriter.posts), so up to concurrency x posts requests are in flight.
- Resume: rows whose posts are all in `output` already (batch_io.done_keys) are skipped and counted as resumed.
  Each finished row is appended to `output` at once (batch_io.append_posts: one rename, never a half file), by
  one writer at a time (an asyncio lock, the file I/O in a thread so the other rows go on), so an interrupted
  run loses at most the rows in flight, and a re-run does not redo the finished ones.
- Rows batch_io reported (missing product, extra column...) are not generated; the summary lists them with
  their row numbers.
- A gateway failure (ChatError) fails that row only, with the client's sentence; the other rows go on. After
  `stop_after` consecutive failed rows the gateway is taken as down: no new row is started (a dead gateway is
  not hammered for thousands of rows), the summary says how many rows were not attempted and that re-running
  the same command continues where this run stopped.
- A file error while appending (disk full, output replaced by something else) stops the batch: it propagates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ernie_ops.client.gateway import ChatError
from ernie_ops.errors import UsageError
from ernie_ops.marketing import batch_io
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import CopyRequest, CopyWriter

STOP_AFTER_FAILURES = 5


class BatchTooLarge(UsageError):
    """More rows than chat.marketing.max_batch_rows."""


@dataclass(frozen=True)
class BatchProgress:
    """After each row: rows done this run (generated or failed) of `total` to do, failures, the row's product."""

    done: int
    total: int
    failed: int
    current: str


@dataclass(frozen=True)
class FailedRow:
    row: int
    product: str
    message: str  # the client's sentence for the user (ChatError.user_text)
    detail: str = ""  # what went wrong technically (ChatError.detail)


@dataclass
class BatchSummary:
    output: str
    rows_total: int = 0  # rows in the file, bad ones included
    generated: int = 0
    resumed: int = 0
    bad_rows: list[batch_io.RowProblem] = field(default_factory=list)
    failed_rows: list[FailedRow] = field(default_factory=list)
    not_attempted: int = 0  # rows left when the batch stopped after consecutive failures
    stopped: str | None = None  # why the batch stopped early
    posts: int = 0
    posts_first_try_ok: int = 0
    posts_ok_after_regeneration: int = 0
    posts_flagged: int = 0
    regenerations: int = 0
    requests: int = 0
    seconds: float = 0.0

    @property
    def rows_per_minute(self) -> float:
        return self.generated * 60.0 / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        """Every row generated (or resumed): nothing failed, bad or left out."""
        return not self.failed_rows and not self.bad_rows and not self.not_attempted

    def as_dict(self) -> dict:
        data = asdict(self)
        data["bad_rows"] = [{"row": p.row, "message": p.message} for p in self.bad_rows]
        data["rows_per_minute"] = round(self.rows_per_minute, 2)
        data["seconds"] = round(self.seconds, 3)
        data["ok"] = self.ok
        data["rerun_continues"] = bool(self.failed_rows or self.not_attempted)
        data["verdict"] = self.verdict()
        return data

    def verdict(self) -> str:
        """One sentence on the outcome and what to do next."""
        if self.ok:
            return f"All {self.generated + self.resumed} row(s) done ({self.resumed} from an earlier run); posts in {self.output}."
        parts = []
        if self.failed_rows:
            parts.append(f"{len(self.failed_rows)} row(s) failed on the gateway")
        if self.not_attempted:
            parts.append(f"{self.not_attempted} row(s) not attempted ({self.stopped})")
        if self.bad_rows:
            parts.append(f"{len(self.bad_rows)} malformed row(s) skipped (fix them in the products file)")
        rerun = (
            " Re-run the same command to continue: finished rows are not generated again." if self.failed_rows or self.not_attempted else ""
        )
        return f"{'; '.join(parts)}; {self.generated + self.resumed} row(s) done, in {self.output}.{rerun}"


async def run_batch(
    read: batch_io.Read,
    output: Path,
    writer: CopyWriter,
    cfg: MarketingConfig,
    *,
    concurrency: int,
    progress: Callable[[BatchProgress], None] | None = None,
    stop_after: int = STOP_AFTER_FAILURES,
) -> BatchSummary:
    """Generate the posts of every row of `read` not already in `output`; see the module docstring."""
    output = Path(output)
    if concurrency < 1:
        raise UsageError(f"concurrency {concurrency} must be at least 1.")
    if len(read.rows) > cfg.max_batch_rows:
        raise BatchTooLarge(
            f"The products file has {len(read.rows)} rows, over chat.marketing.max_batch_rows = {cfg.max_batch_rows};"
            " split it or raise the limit."
        )
    started = time.perf_counter()
    requests0, regenerations0 = writer.stats.requests, writer.stats.regenerations
    summary = BatchSummary(output=str(output), rows_total=len(read.rows) + read.bad_rows, bad_rows=list(read.problems))
    done = batch_io.done_keys(output)  # refuses an output that is not a posts file before any request
    todo = [p for p in read.rows if p.key not in done]
    summary.resumed = len(read.rows) - len(todo)
    queue = list(reversed(todo))  # pop() takes rows in file order
    lock = asyncio.Lock()
    consecutive = 0
    finished = 0

    def report(current: str) -> None:
        if progress is not None:
            progress(BatchProgress(finished, len(todo), len(summary.failed_rows), current))

    async def one(product: batch_io.Product) -> None:
        nonlocal consecutive, finished
        req = CopyRequest.from_product(product, cfg)
        try:
            posts = await writer.posts(req)
        except ChatError as e:
            summary.failed_rows.append(FailedRow(product.row, product.product, e.user_text, e.detail))
            consecutive += 1
        else:
            results = [
                batch_io.PostResult(product.key, product.product, i, len(posts), p.text, p.chars, tuple(p.flags))
                for i, p in enumerate(posts, start=1)
            ]
            async with lock:
                await asyncio.to_thread(batch_io.append_posts, output, results)
            consecutive = 0
            summary.generated += 1
            summary.posts += len(posts)
            summary.posts_first_try_ok += sum(p.first_try_ok for p in posts)
            summary.posts_ok_after_regeneration += sum(p.ok and p.attempts > 1 for p in posts)
            summary.posts_flagged += sum(not p.ok for p in posts)
        finished += 1
        report(product.product)

    async def worker() -> None:
        while queue and consecutive < stop_after:
            await one(queue.pop())

    report("")
    workers = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, max(1, len(todo))))]
    try:
        await asyncio.gather(*workers)
    except BaseException:  # a file error or a cancel: stop the other rows too (finished ones are in the output)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        summary.seconds = time.perf_counter() - started
        summary.requests = writer.stats.requests - requests0
        summary.regenerations = writer.stats.regenerations - regenerations0
    summary.failed_rows.sort(key=lambda f: f.row)  # file order, whichever request failed first
    if queue:
        summary.not_attempted = len(queue)
        summary.stopped = f"stopped after {stop_after} consecutive rows failed on the gateway"
    return summary
