"""Speed of the document index (ernie_ops.docs.store) on synthetic corpora: prints numbers, asserts nothing.

    ~/.cache/ernie-ops/venv/bin/python -m benchmarks.store_bench [--sizes 1000,10000,100000] [--queries 300]

For each size: insert throughput (passages/s, tokenising included), index size per 1k passages, the time to
open the file (quick_check included), and search latency p50/p99 for questions drawn from the corpus, once
over everything shared and once scoped to one owner's conversation among many owners. With --contentless
it also builds the same FTS5 index as a contentless table (content='') to show what storing the token
column costs.

The corpus is generated (seeded, no downloads): passages of ~300 characters mixing Chinese text (characters
drawn with a Zipf law from 3,000 common ones, so frequent bigrams like the function words of real text
exist) and English words (a Zipf-distributed invented vocabulary of 5,000 words), 20 passages per document,
one document in ten private to one of 50 owners. Questions are an 8-character Chinese stretch of some
passage plus one or two of its English words: realistic length, a mix of rare and very common terms.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from ernie_ops.docs import index_file, index_search, tokens
from ernie_ops.docs.model import Chunk
from ernie_ops.docs.store import DEFAULT_TOKENIZER, Index, Scope

PER_DOC = 20


class Corpus:
    def __init__(self, seed: int = 7):
        self.rng = random.Random(seed)
        chars = [chr(c) for c in range(0x4E00, 0x9FA5)]
        self.rng.shuffle(chars)
        self.chars = chars[:3000]
        self.char_cum = list(itertools.accumulate(1 / (i + 1) ** 1.1 for i in range(len(self.chars))))
        syll = ["ka", "lo", "mi", "ne", "tor", "vex", "sun", "par", "qui", "dex", "ra", "po", "lin", "gor", "set", "ab"]
        words = set()
        while len(words) < 5000:
            words.add("".join(self.rng.choice(syll) for _ in range(self.rng.randint(1, 4))))
        self.words = sorted(words)
        self.rng.shuffle(self.words)
        self.word_cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(self.words))))

    def passage(self) -> str:
        parts, size = [], 0
        while size < 300:
            if self.rng.random() < 0.75:
                run = "".join(self.rng.choices(self.chars, cum_weights=self.char_cum, k=self.rng.randint(6, 30)))
                run += self.rng.choice("，。；！？")
            else:
                run = " " + " ".join(self.rng.choices(self.words, cum_weights=self.word_cum, k=self.rng.randint(1, 4))) + " "
            parts.append(run)
            size += len(run)
        return "".join(parts)

    def question(self, text: str) -> str:
        cjk = [i for i, ch in enumerate(text) if "\u4e00" <= ch <= "\u9fff"]
        start = self.rng.choice(cjk[:-8]) if len(cjk) > 8 else 0
        zh = "".join(ch for ch in text[start : start + 10] if "\u4e00" <= ch <= "\u9fff")[:8]
        en = [w for w in text.split() if w.isascii() and w.isalpha()]
        return zh + " " + " ".join(self.rng.sample(en, min(len(en), self.rng.randint(1, 2))))


def _chunks(texts: list[str]) -> list[Chunk]:
    return [Chunk(t, i, 0, len(t)) for i, t in enumerate(texts)]


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def build(path: Path, n_chunks: int, corpus: Corpus, tokenizer: str) -> tuple[Index, list[str], float]:
    idx = Index(path, tokenizer=tokenizer)
    samples: list[str] = []
    secs = 0.0
    for d in range(n_chunks // PER_DOC):
        texts = [corpus.passage() for _ in range(PER_DOC)]
        owner = f"user{d % 50}" if d % 10 == 0 else None
        t0 = time.perf_counter()
        idx.add(f"doc{d}.md", f"{d:064x}", 6000, "markdown", _chunks(texts), owner=owner, conversation="c1" if owner else None)
        secs += time.perf_counter() - t0
        if len(samples) < 2000:
            samples.append(corpus.rng.choice(texts))
    return idx, samples, secs


def measure(idx: Index, questions: list[str], scope: Scope) -> dict[str, float]:
    """Wall-clock and CPU (this thread's) milliseconds per search: CPU time is what the query costs when
    other work shares the cores; wall time is what a user waits on this machine as loaded now."""
    for q in questions[:20]:  # warm the page cache
        idx.search(q, scope, k=5)
    wall, cpu = [], []
    for q in questions:
        t, c = time.perf_counter(), time.thread_time()
        idx.search(q, scope, k=5)
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return {"wall50": _pct(wall, 50), "wall99": _pct(wall, 99), "cpu50": _pct(cpu, 50), "cpu99": _pct(cpu, 99)}


def contentless_size(path: Path, idx: Index, tokenizer: str) -> int:
    """The same FTS5 index without its stored token column (content=''), for the size comparison."""
    other = sqlite3.connect(path)
    other.execute("CREATE VIRTUAL TABLE fts USING fts5 (tokens, content='', tokenize = 'unicode61 remove_diacritics 2')")
    src = sqlite3.connect(idx.path)
    other.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", src.execute("SELECT rowid, tokens FROM fts"))
    other.commit()
    other.execute("VACUUM")
    other.close()
    src.close()
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, choices=tokens.TOKENIZERS)
    ap.add_argument("--contentless", action="store_true")
    ap.add_argument("--budget", type=int, default=index_search.POSTINGS_BUDGET, help="index_search.POSTINGS_BUDGET for this run")
    ap.add_argument("--keep", metavar="DIR", help="build the indexes in DIR and keep them (reused when there)")
    args = ap.parse_args()
    index_search.POSTINGS_BUDGET = args.budget
    corpus = Corpus()
    print(f"tokenizer {args.tokenizer}; k=5; {args.queries} questions per measurement; postings budget {args.budget}")
    print("passages  insert/s  KB/1k  open ms  scope   wall p50  wall p99  cpu p50  cpu p99  (ms)")
    with contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"docs-{n}.sqlite"
            if path.exists():  # --keep: reuse (no insert figure then)
                idx, secs = Index(path, tokenizer=args.tokenizer), float("nan")
                samples = [r[0] for r in sqlite3.connect(path).execute("SELECT text FROM texts ORDER BY id LIMIT 2000")]
            else:
                idx, samples, secs = build(path, n, corpus, args.tokenizer)
            idx.close()
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            index_file.CHECKED.clear()  # time a process's first open (quick_check included), not a re-open
            t = time.perf_counter()
            idx = Index(path, tokenizer=args.tokenizer)
            open_ms = (time.perf_counter() - t) * 1000
            questions = [corpus.question(corpus.rng.choice(samples)) for _ in range(args.queries)]
            size = idx.stats().bytes
            for label, scope in (("all", Scope()), ("own", Scope([], "user10", "c1"))):
                m = measure(idx, questions, scope)
                head = f"{n:>8} {n / secs:>9.0f} {size / n:>6.0f} {open_ms:>8.0f}" if label == "all" else " " * 34
                print(f"{head}  {label:5} {m['wall50']:>9.2f} {m['wall99']:>9.2f} {m['cpu50']:>8.2f} {m['cpu99']:>8.2f}", flush=True)
            if args.contentless:
                cl = contentless_size(Path(tmp) / f"contentless-{n}.sqlite", idx, args.tokenizer)
                tok_bytes = sqlite3.connect(path).execute("SELECT sum(length(CAST(tokens AS BLOB))) FROM fts").fetchone()[0]
                print(f"{'':>9} FTS5 alone: {cl / n:.0f} B/passage contentless; the stored token column adds {tok_bytes / n:.0f} B/passage")
            idx.close()


if __name__ == "__main__":
    main()
