"""Speed of the chat history (ernie_ops.threads.store) on SQLite: prints numbers, asserts nothing.

    ~/.cache/ernie-ops/venv/bin/python -m benchmarks.history_bench [--users 20] [--threads 200] [--steps 200] [--repeat 50]

Builds a history of `--users` users with `--threads` threads each (4 messages per thread; one user also has a
thread of `--steps` messages, every reply with two source elements), then times, `--repeat` times each:
the thread list of one user (`list_threads`, 20 and all `--threads` of them), opening the long thread
(`get_thread` + `steps` + `elements`, what a resume reads) and saving one more message (`upsert_step`). Messages
are ~400 characters of mixed Chinese/English text, a reply's size in the Docs scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ernie_ops.threads.store import ThreadStore

CHARS = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]


def text(rng: random.Random, n: int = 400) -> str:
    return "".join(rng.choice(CHARS) if rng.random() < 0.8 else rng.choice(" abcdefgh。，") for _ in range(n))


def stamp(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


async def build(store: ThreadStore, users: int, threads: int, steps: int, rng: random.Random) -> None:
    t0 = datetime.now(UTC) - timedelta(days=30)
    for u in range(users):
        for i in range(threads):
            tid = f"u{u}-t{i}"
            await store.upsert_thread(tid, user=f"user{u}", name=f"问题 {i} " + text(rng, 20), metadata={"chat_profile": "Docs Q&A"})
            for k in range(4):
                kind = "user_message" if k % 2 == 0 else "assistant_message"
                await store.upsert_step({"id": f"{tid}-s{k}", "threadId": tid, "type": kind, "output": text(rng), "createdAt": stamp(t0)})
    long_id = "long"
    await store.upsert_thread(long_id, user="user0", name="a long conversation")
    for k in range(steps):
        kind = "user_message" if k % 2 == 0 else "assistant_message"
        sid = f"long-s{k}"
        await store.upsert_step(
            {"id": sid, "threadId": long_id, "type": kind, "output": text(rng), "createdAt": stamp(t0 + timedelta(seconds=k))}
        )
        if kind == "assistant_message":
            for n in (1, 2):
                el = {"id": f"{sid}-e{n}", "threadId": long_id, "forId": sid, "name": f"【{n}】", "type": "text", "display": "side"}
                await store.upsert_element(el, text(rng).encode())


async def timed(fn, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


async def run(args: argparse.Namespace, path: Path) -> None:
    rng = random.Random(7)
    url = f"sqlite+aiosqlite:///{path}"
    store = await ThreadStore.open(url)
    start = time.perf_counter()
    await build(store, args.users, args.threads, args.steps, rng)
    built = time.perf_counter() - start
    writes = args.users * args.threads * 5 + args.steps * 2
    print(f"built {args.users} users x {args.threads} threads + one of {args.steps} messages in {built:.1f} s "
          f"({writes / built:.0f} writes/s); file {path.stat().st_size / 1e6:.1f} MB")  # fmt: skip
    await store.close()
    start = time.perf_counter()
    store = await ThreadStore.open(url)
    print(f"open (schema check): {(time.perf_counter() - start) * 1000:.1f} ms")

    async def list_page():
        rows, _ = await store.list_threads("user1", limit=20)
        assert len(rows) == min(20, args.threads)

    async def list_all():
        rows, _ = await store.list_threads("user1", limit=args.threads)
        assert len(rows) == args.threads

    async def open_long():
        assert await store.get_thread("long") is not None
        assert len(await store.steps("long")) == args.steps
        await store.elements("long")

    counter = iter(range(10**9))

    async def save_one():
        k = next(counter)
        await store.upsert_step(
            {"id": f"extra-{k}", "threadId": "u2-t0", "type": "user_message", "output": "再问一句", "createdAt": stamp(datetime.now(UTC))}
        )

    print(f"{'operation':46} {'p50 ms':>8} {'p95 ms':>8}   ({args.repeat} runs)")
    for label, fn in (
        ("list_threads, first page of 20", list_page),
        (f"list_threads, all {args.threads} of one user", list_all),
        (f"open a thread of {args.steps} messages (+{args.steps} elements)", open_long),
        ("save one message (upsert_step)", save_one),
    ):
        p50, p95 = await timed(fn, args.repeat)
        print(f"{label:46} {p50:8.2f} {p95:8.2f}")
    await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="history-bench-") as tmp:
        asyncio.run(run(args, Path(tmp) / "history.sqlite"))


if __name__ == "__main__":
    main()
