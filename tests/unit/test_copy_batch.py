"""marketing/batch.py's run_batch without a server: bounded concurrency, resume, bad rows, failed rows, stopping.

The CopyWriter here gets an INJECTED `complete` function (no gateway): it answers per product as a test scripts
it (a post too long on demand, a gateway error for a chosen product, a gateway that is down), which the real
model cannot be made to do. The real gateway path is tests/integration/test_copy_gateway.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from ernie_ops.client.gateway import ChatError
from ernie_ops.marketing import batch_io
from ernie_ops.marketing.batch import BatchTooLarge, run_batch
from ernie_ops.marketing.batch_io import BatchFileError
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import ANGLES, CopyWriter


def products_csv(path: Path, names: list[str], extra_rows: str = "") -> Path:
    lines = ["product,selling_points,audience"] + [f"{n},轻便耐用,上班族" for n in names]
    path.write_text("\n".join(lines) + "\n" + extra_rows, encoding="utf-8")
    return path


def post_index(messages) -> int:
    return int(re.search(r"Post (\d+) of", messages[1]["content"]).group(1))


def long_post(index: int) -> str:
    """80 characters, each post of a product its own (the same text twice would be a near-duplicate)."""
    return (ANGLES[index - 1][0] * 10)[:80]


class Fake:
    """The injected `complete`: answers per product named in the prompt, each post of a product from its own
    angle (distinct posts, as a model asked for different angles writes); records calls and the peak in flight."""

    def __init__(self, *, fail: set[str] = frozenset(), too_long: set[str] = frozenset(), down: bool = False, delay: float = 0.005):
        self.fail, self.too_long, self.down, self.delay = fail, too_long, down, delay
        self.calls: list[str] = []
        self.active = self.peak = 0

    async def __call__(self, messages, max_tokens, temperature, stats=None, extra=None):
        product = messages[1]["content"].split("Product: ", 1)[1].split("\n", 1)[0]
        self.calls.append(product)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
            if self.down or product in self.fail:
                raise ChatError("down", f"no gateway for {product}")
            index = post_index(messages)
            if product in self.too_long and len(messages) == 2:  # too long on the first try only
                return json.dumps({"posts": [long_post(index)]}, ensure_ascii=False)
            return json.dumps({"posts": [f"{product}，{ANGLES[index - 1][0]}"]}, ensure_ascii=False)
        finally:
            self.active -= 1


CFG = MarketingConfig(posts=2, max_chars=30, max_attempts=2)


def batch(input_path: Path, output: Path, fake: Fake, cfg: MarketingConfig = CFG, concurrency: int = 2, **kw):
    writer = CopyWriter(None, cfg, "S", complete=fake)
    seen = []
    summary = asyncio.run(
        run_batch(batch_io.read_products(input_path), output, writer, cfg, concurrency=concurrency, progress=seen.append, **kw)
    )
    return summary, seen


def test_every_row_is_generated_with_bounded_concurrency(tmp_path):
    names = [f"产品{i}" for i in range(10)]
    fake = Fake()
    summary, seen = batch(products_csv(tmp_path / "in.csv", names), tmp_path / "out.csv", fake, concurrency=3)
    assert summary.ok and summary.generated == 10 and summary.posts == 20 and summary.posts_first_try_ok == 20
    assert fake.peak == 6  # 3 rows at once, 2 posts each
    rows, dropped = batch_io.read_posts(tmp_path / "out.csv")
    assert dropped == 0 and sorted({r.product for r in rows}) == sorted(names) and len(rows) == 20
    assert seen[0].done == 0 and seen[-1].done == 10 and seen[-1].total == 10 and seen[-1].failed == 0
    assert summary.requests == 20 and summary.regenerations == 0 and summary.rows_per_minute > 0


def test_flags_and_regenerations_reach_the_output_and_the_summary(tmp_path):
    # injected: product 产品1's first tries are too long, so they are regenerated once
    fake = Fake(too_long={"产品1"})
    summary, _ = batch(products_csv(tmp_path / "in.csv", ["产品0", "产品1"]), tmp_path / "out.csv", fake)
    assert summary.regenerations == 2 and summary.posts_ok_after_regeneration == 2 and summary.posts_first_try_ok == 2
    assert summary.posts_flagged == 0

    fake = Fake(too_long={"产品1"})
    cfg = MarketingConfig(posts=2, max_chars=30, max_attempts=1)  # no second try: the long posts stay, flagged
    summary, _ = batch(products_csv(tmp_path / "in2.csv", ["产品0", "产品1"]), tmp_path / "out2.csv", fake, cfg)
    assert summary.posts_flagged == 2 and summary.regenerations == 0 and summary.ok  # flagged posts are still a generated row
    rows, _ = batch_io.read_posts(tmp_path / "out2.csv")
    flagged = [r for r in rows if r.product == "产品1"]
    assert [r.flags for r in flagged] == [("too_long:80/30",), ("too_long:80/30",)] and flagged[0].text == long_post(1)


def test_a_rerun_skips_the_finished_rows(tmp_path):
    names = [f"产品{i}" for i in range(6)]
    products = products_csv(tmp_path / "in.csv", names)
    out = tmp_path / "out.csv"
    first = Fake(fail={"产品2", "产品4"})
    summary, _ = batch(products, out, first)
    assert summary.generated == 4 and [f.row for f in summary.failed_rows] == [4, 6] and not summary.ok
    assert summary.failed_rows[0].message == ChatError("down", "").user_text
    assert "Re-run the same command to continue" in summary.verdict()
    second = Fake()
    summary, _ = batch(products, out, second)
    assert summary.resumed == 4 and summary.generated == 2 and summary.ok
    assert sorted(set(second.calls)) == ["产品2", "产品4"]  # the finished rows were not requested again
    rows, _ = batch_io.read_posts(out)
    assert sorted({r.product for r in rows}) == names and len(rows) == 12


def test_an_interrupted_batch_keeps_the_finished_rows(tmp_path):
    names = [f"产品{i}" for i in range(8)]
    products = products_csv(tmp_path / "in.csv", names)
    out = tmp_path / "out.csv"

    async def interrupted():
        writer = CopyWriter(None, CFG, "S", complete=Fake(delay=0.02))
        done = asyncio.Event()

        def progress(p):
            if p.done >= 3:
                done.set()

        task = asyncio.ensure_future(run_batch(batch_io.read_products(products), out, writer, CFG, concurrency=1, progress=progress))
        await done.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    kept = batch_io.done_keys(out)
    assert 3 <= len(kept) < 8
    second = Fake()
    summary, _ = batch(products, out, second)
    assert summary.resumed == len(kept) and summary.generated == 8 - len(kept)
    assert len(second.calls) == 2 * (8 - len(kept))


def test_bad_rows_are_reported_with_their_row_numbers_and_not_generated(tmp_path):
    products = products_csv(tmp_path / "in.csv", ["产品0"], extra_rows=",没有产品,学生\n产品9,好,人,多余\n")
    fake = Fake()
    summary, _ = batch(products, tmp_path / "out.csv", fake)
    assert summary.generated == 1 and summary.rows_total == 3 and not summary.ok
    assert [p.row for p in summary.bad_rows] == [3, 4] and set(fake.calls) == {"产品0"}
    assert "malformed" in summary.verdict() and summary.as_dict()["bad_rows"][0]["row"] == 3


def test_a_dead_gateway_stops_the_batch_after_consecutive_failures(tmp_path):
    names = [f"产品{i}" for i in range(40)]
    fake = Fake(down=True)
    summary, _ = batch(products_csv(tmp_path / "in.csv", names), tmp_path / "out.csv", fake, concurrency=2, stop_after=5)
    attempted = len(summary.failed_rows)
    assert 5 <= attempted <= 6  # the rows in flight when the fifth failure came finish too
    assert summary.not_attempted == 40 - attempted and summary.generated == 0
    assert "consecutive" in summary.stopped and "Re-run" in summary.verdict()
    data = summary.as_dict()
    assert data["rerun_continues"] and data["not_attempted"] == 40 - attempted and not data["ok"]
    assert not (tmp_path / "out.csv").exists()


def test_a_success_resets_the_failure_count(tmp_path):
    names = [f"产品{i}" for i in range(12)]
    fail = {f"产品{i}" for i in range(12) if i % 3}  # two failures, one success, repeated: never 3 in a row
    summary, _ = batch(products_csv(tmp_path / "in.csv", names), tmp_path / "out.csv", Fake(fail=fail), concurrency=1, stop_after=3)
    assert summary.not_attempted == 0 and len(summary.failed_rows) == 8 and summary.generated == 4


def test_an_output_that_is_not_a_posts_file_is_refused_before_any_request(tmp_path):
    products = products_csv(tmp_path / "in.csv", ["产品0"])
    other = tmp_path / "notes.csv"
    other.write_text("name,phone\nA,123\n", encoding="utf-8")
    fake = Fake()
    with pytest.raises(BatchFileError, match="not a posts file"):
        batch(products, other, fake)
    assert fake.calls == [] and other.read_text(encoding="utf-8") == "name,phone\nA,123\n"


def test_too_many_rows_are_refused(tmp_path):
    products = products_csv(tmp_path / "in.csv", ["a", "b", "c"])
    with pytest.raises(BatchTooLarge, match="max_batch_rows = 2"):
        batch(products, tmp_path / "out.csv", Fake(), MarketingConfig(max_batch_rows=2))


def test_xlsx_output(tmp_path):
    summary, _ = batch(products_csv(tmp_path / "in.csv", ["产品0", "产品1"]), tmp_path / "out.xlsx", Fake())
    assert summary.ok
    rows, _ = batch_io.read_posts(tmp_path / "out.xlsx")
    assert len(rows) == 4


def test_failed_rows_are_listed_in_file_order_whichever_failed_first(tmp_path):
    """Rows run at once: a later row's request may fail first (CI: row 3 before row 2 against a dead gateway); the
    summary lists them in file order."""

    class FirstRowSlow(Fake):
        async def __call__(self, messages, *args, **kwargs):
            if "Product: 产品0\n" in messages[1]["content"]:
                await asyncio.sleep(0.05)
            return await super().__call__(messages, *args, **kwargs)

    summary, _ = batch(products_csv(tmp_path / "in.csv", ["产品0", "产品1"]), tmp_path / "out.csv", FirstRowSlow(down=True))
    assert [f.row for f in summary.failed_rows] == [2, 3], summary.failed_rows
