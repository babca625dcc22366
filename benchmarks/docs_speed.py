"""Speed of document Q&A on realistic text: ingest throughput and query latency; prints tables, asserts nothing.

    python -m benchmarks.docs_speed [--sizes 1000,10000,100000] [--pdf-pages 200] [--md-copies 30] [--tokenizer T]

1. Ingest (ernie_ops.docs.extract -> chunk -> store.Index.add, the product defaults from DocsConfig), per format,
   with the time of each phase: text PDFs generated here with reportlab from the corpus's own sentences (English in
   Helvetica; Chinese in WenQuanYi Micro Hei, an embedded TrueType subset, and in the non-embedded CID font
   STSong-Light), ~36 lines a page -> pages/s; the corpus's Markdown files, copied under new names -> MB/s; DOCX
   files generated with python-docx from the same sections -> MB/s. (In the product each file is extracted in a
   child process, ernie_ops.docs.isolate; that adds a fixed ~0.1-0.3 s per file, not measured here.)
2. Query latency at 1k, 10k, 100k passages: passages made by recombining the corpus's real sentences (each passage
   one language, ~chunk_chars long, so the vocabulary and term frequencies are those of real internal docs, and
   at 100k every corpus term is in thousands of passages: a worst case for posting lists), 20 passages a
   document; queried with the golden set's real questions (answerable and unanswerable), over all shared
   documents. The timing loop is benchmarks/store_bench.py's `measure` (k=5; wall and CPU time per query: on a
   loaded machine the CPU time is the query's cost, the wall time what a user waits; the store's own bench uses a
   Zipf-synthetic corpus instead); also build rate, index size per 1k passages, and the growth of each from one
   size to the next (x10 passages).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.docs_quality import load_corpus, load_golden, source_state
from benchmarks.store_bench import measure
from ernie_ops.docs import tokens
from ernie_ops.docs.chunk import chunk, split_sentences
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.extract import extract
from ernie_ops.docs.model import Chunk
from ernie_ops.docs.store import Index, Scope
from tests.harness.doc_fixtures import pdf_pages

PER_DOC = 20
LINES_PER_PAGE = 36
CJK_LINE = 38  # characters per line at 12 pt on A4 with 50 pt margins
EN_LINE = 88


def _is_zh(text: str) -> bool:
    return sum("\u4e00" <= ch <= "\u9fff" for ch in text) > len(text) / 4


def corpus_sentences() -> dict[str, list[str]]:
    """The corpus's sentences by language ("zh": mostly Chinese, "en": the rest), in corpus order."""
    out: dict[str, list[str]] = {"zh": [], "en": []}
    for d in load_corpus():
        for s in d.extracted.sections:
            for a, b in split_sentences(s.text):
                sent = s.text[a:b]
                if len(sent) >= 8:
                    out["zh" if _is_zh(sent) else "en"].append(sent)
    return out


def _wrap(sentences: list[str], width: int) -> list[str]:
    lines: list[str] = []
    for sent in sentences:
        while len(sent) > width:
            cut = sent.rfind(" ", 0, width) if width == EN_LINE else width
            cut = cut if cut > 0 else width
            lines.append(sent[:cut].rstrip())
            sent = sent[cut:].lstrip()
        if sent:
            lines.append(sent)
    return lines


def pdf_from(sentences: list[str], pages: int, font: str, width: int) -> bytes:
    lines = _wrap(sentences, width)
    need = pages * LINES_PER_PAGE
    lines = (lines * (need // len(lines) + 1))[:need]
    return pdf_pages([lines[i : i + LINES_PER_PAGE] for i in range(0, need, LINES_PER_PAGE)], font)


def docx_from(sections) -> bytes:
    import docx

    doc = docx.Document()
    for s in sections:
        if s.heading:
            doc.add_heading(s.heading[-1], level=min(len(s.heading), 9))
        for line in s.text.split("\n")[1 if s.heading else 0 :]:
            doc.add_paragraph(line)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


@dataclass
class Phases:
    files: int = 0
    pages: int = 0
    bytes: int = 0
    passages: int = 0
    extract: float = 0.0
    chunk: float = 0.0
    index: float = 0.0

    @property
    def total(self) -> float:
        return self.extract + self.chunk + self.index


def ingest(index: Index, files: list[tuple[str, bytes]], cfg: DocsConfig) -> Phases:
    ph = Phases()
    for name, data in files:
        t0 = time.perf_counter()
        ex = extract(data, name)
        t1 = time.perf_counter()
        chunks = chunk(ex.sections, cfg.chunk_chars, cfg.overlap_chars)
        t2 = time.perf_counter()
        index.add(name, hashlib.sha256(data).hexdigest(), len(data), ex.kind, chunks, pages=ex.pages)
        t3 = time.perf_counter()
        ph.files += 1
        ph.pages += ex.pages or 0
        ph.bytes += len(data)
        ph.passages += len(chunks)
        ph.extract += t1 - t0
        ph.chunk += t2 - t1
        ph.index += t3 - t2
    return ph


def recombined_passages(sentences: dict[str, list[str]], n: int, size: int, seed: int = 11) -> list[str]:
    """n passages of about `size` characters, each of random real sentences of one language."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        pool = sentences["zh" if i % 2 == 0 else "en"]
        parts, length = [], 0
        while length < size * 0.8:
            s = rng.choice(pool)
            parts.append(s)
            length += len(s) + 1
        out.append(" ".join(parts)[:size])
    return out


def build_synthetic(path: Path, passages: list[str], tokenizer: str) -> float:
    """Index the passages 20 to a document; the seconds spent in Index.add."""
    idx = Index(path, tokenizer=tokenizer)
    secs = 0.0
    for d in range(0, len(passages), PER_DOC):
        batch = [Chunk(t, 0, 0, len(t)) for t in passages[d : d + PER_DOC]]
        t0 = time.perf_counter()
        idx.add(f"doc{d // PER_DOC}.md", f"{d:064x}", sum(len(c.text) for c in batch), "markdown", batch)
        secs += time.perf_counter() - t0
    idx.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return secs


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    cfg = DocsConfig()
    p = argparse.ArgumentParser(prog="python -m benchmarks.docs_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000", help="passage counts for the latency table")
    p.add_argument("--pdf-pages", type=int, default=200, help="pages per PDF kind (4 files of a quarter each)")
    p.add_argument("--md-copies", type=int, default=30, help="copies of the corpus's Markdown files to ingest")
    p.add_argument("--docx-copies", type=int, default=3, help="copies of the corpus as DOCX files")
    p.add_argument("--tokenizer", default=cfg.tokenizer, choices=tokens.TOKENIZERS)
    p.add_argument("--no-ingest", action="store_true", help="only the latency table")
    p.add_argument("--repeat", type=int, default=3, help="each golden question is asked this many times per size")
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    con = Console(width=max(Console().width, 140))

    corpus = load_corpus()
    sentences = corpus_sentences()
    answerable, unanswerable = load_golden(corpus)
    questions = [q.q for q in answerable + unanswerable] * a.repeat
    run = Table(title="Run", title_justify="left", show_header=False)
    run.add_column()
    run.add_column()
    run.add_row("settings", f"tokenizer={a.tokenizer} chunk_chars={cfg.chunk_chars} overlap_chars={cfg.overlap_chars} top_k={cfg.top_k}")
    run.add_row("sentences", f"{len(sentences['zh'])} Chinese, {len(sentences['en'])} English, from {len(corpus)} corpus files")
    run.add_row("questions", f"{len(answerable) + len(unanswerable)} golden questions x {a.repeat} per size")
    run.add_row("source", source_state())
    run.add_row(
        "load average", " ".join(f"{x:.1f}" for x in __import__("os").getloadavg()) + f" on {__import__('os').cpu_count()} CPUs (at start)"
    )
    run.add_row("python / sqlite", f"{__import__('sys').version.split()[0]} / {sqlite3.sqlite_version}")
    con.print(run)

    kinds: list[tuple[str, Callable[[], list[tuple[str, bytes]]]]] = []
    per = max(1, a.pdf_pages // 4)
    kinds.append(
        (
            "PDF, English (Helvetica)",
            lambda: [(f"en-{i}.pdf", pdf_from(sentences["en"][i * 50 :], per, "helvetica", EN_LINE)) for i in range(4)],
        )
    )
    kinds.append(
        (
            "PDF, Chinese (embedded TTF)",
            lambda: [(f"zh-{i}.pdf", pdf_from(sentences["zh"][i * 50 :], per, "ttf", CJK_LINE)) for i in range(4)],
        )
    )
    kinds.append(
        (
            "PDF, Chinese (CID STSong-Light)",
            lambda: [(f"zhcid-{i}.pdf", pdf_from(sentences["zh"][i * 50 :], per, "cid", CJK_LINE)) for i in range(4)],
        )
    )
    md = [d for d in corpus if d.extracted.kind == "markdown"]
    kinds.append(("Markdown (corpus)", lambda: [(f"{c}-{d.name}", d.data) for c in range(a.md_copies) for d in md]))
    kinds.append(
        (
            "DOCX (corpus sections)",
            lambda: [(f"{c}-{d.name}.docx", docx_from(d.extracted.sections)) for c in range(a.docx_copies) for d in md],
        )
    )

    ing = Table(title="Ingest: extract -> chunk -> Index.add (one process, no isolation)", title_justify="left")
    for c in ("format", "files", "pages", "MB", "passages", "extract s", "chunk s", "index s", "pages/s", "MB/s", "passages/s"):
        ing.add_column(c, justify="right" if c != "format" else "left")
    with tempfile.TemporaryDirectory(prefix="docs-speed-") as tmp:
        for label, make in [] if a.no_ingest else kinds:
            files = make()
            index = Index(Path(tmp) / f"ingest-{len(ing.rows)}.sqlite", tokenizer=a.tokenizer)
            ph = ingest(index, files, cfg)
            index.close()
            mb = ph.bytes / 1048576
            ing.add_row(
                label, str(ph.files), str(ph.pages or "-"), f"{mb:.2f}", str(ph.passages), f"{ph.extract:.2f}",
                f"{ph.chunk:.2f}", f"{ph.index:.2f}", f"{ph.pages / ph.total:.0f}" if ph.pages else "-", f"{mb / ph.total:.2f}",
                f"{ph.passages / ph.total:.0f}",
            )  # fmt: skip
        if not a.no_ingest:
            con.print(ing)

        lat = Table(title="Query latency in ms (Index.search, k=5, all shared documents, recombined real sentences)", title_justify="left")
        cols = ("passages", "build s", "passages/s", "KB per 1k", "open ms", "wall p50", "wall p99", "cpu p50", "cpu p99")
        for c in (*cols, "size growth", "cpu p50 growth", "cpu p99 growth"):
            lat.add_column(c, justify="right")
        prev = None
        for n in sizes:
            path = Path(tmp) / f"latency-{n}.sqlite"
            passages = recombined_passages(sentences, n, cfg.chunk_chars)
            secs = build_synthetic(path, passages, a.tokenizer)
            t0 = time.perf_counter()
            idx = Index(path, tokenizer=a.tokenizer)
            open_ms = (time.perf_counter() - t0) * 1000
            m = measure(idx, questions, Scope())
            size = idx.stats().bytes
            idx.close()
            now = (size, m["cpu50"], m["cpu99"])
            growth = ("-", "-", "-") if prev is None else tuple(f"x{v / pv:.1f}" for v, pv in zip(now, prev, strict=True))
            lat.add_row(
                str(n), f"{secs:.1f}", f"{n / secs:.0f}", f"{size / n:.0f}", f"{open_ms:.0f}",
                *(f"{m[key]:.2f}" for key in ("wall50", "wall99", "cpu50", "cpu99")), *growth,
            )  # fmt: skip
            prev = now
            path.unlink()
            con.print(f"  {n} passages done", highlight=False)
        con.print(lat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
