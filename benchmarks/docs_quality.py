"""Retrieval quality of the document index on the golden set: prints tables, asserts nothing.

    python -m benchmarks.docs_quality [--k 10] [--sizes 200/40,400/80] [--embeddings URL MODEL]

Corpus: tests/data/docs_corpus/ (35 internal documents of an imaginary company, Chinese and English, with
overlapping vocabulary). Golden set: tests/data/docs_golden.yaml (questions with the file and answer substrings
that make a retrieved passage count; unanswerable questions for the relevance gate).

A question is answered at rank r when the r-th hit comes from one of its files and contains one of its answer
substrings. recall@n = share of questions answered within the first n hits; MRR = mean of 1/r (0 when not in the
first --k). Every index is built the product's way: ernie_ops.docs.extract -> chunk -> store.Index.add, searched
with Index.search (FTS5 BM25 over tokens.index_text), so "whitespace" is plain whitespace-tokenised BM25, what
common RAG stacks do by default, and the other rows are the CJK-aware tokenizers in tokens.TOKENIZERS.

Tables:
1. tokenizers at the product's chunk size: recall@1, recall@3, MRR, overall and per language;
2. chunk size/overlap sweep for the best tokenizer (by recall@3 then MRR);
3. with --embeddings URL MODEL: dense alone and reciprocal-rank fusion (retrieve.Retriever's way) next to lexical;
4. questions in a conversation (the product's defaults): the golden follow-ups (each after its previous question),
   topic switches, and the golden questions asked one after another: recall@3 and answered (past the gate, in the
   top 3) of the newest message searched alone ("before") and with the conversation (Retriever.search's `previous`);
5. relevance-gate calibration: for thresholds on the best passage's Hit.coverage (among the top_k the chat app
   retrieves), the share of answerable questions kept and of unanswerable ones refused, and a suggested threshold.

The functions here are shared with tests/unit/test_docs_quality.py (the quality gate).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from ernie_ops.docs import index_file, terms, tokens
from ernie_ops.docs.chunk import chunk
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.extract import extract
from ernie_ops.docs.fusion import rrf
from ernie_ops.docs.model import Extracted, Hit
from ernie_ops.docs.retrieve import Retriever
from ernie_ops.docs.store import Index, Scope

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CORPUS = DATA / "docs_corpus"
GOLDEN = DATA / "docs_golden.yaml"
LANGS = ("zh", "en")
SWEEP = ((200, 40), (300, 60), (400, 80), (600, 120), (800, 160))
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(0, 19))


@dataclass(frozen=True)
class Question:
    q: str
    lang: str
    docs: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    name: str
    data: bytes
    extracted: Extracted


@dataclass(frozen=True)
class Scores:
    n: int
    r1: float
    r3: float
    mrr: float


class GoldenError(Exception):
    """The golden set does not fit the corpus (a file or an answer that is not there)."""


def load_corpus(directory: Path = CORPUS) -> list[Document]:
    docs = []
    for path in sorted(directory.iterdir()):
        if path.is_file():
            data = path.read_bytes()
            docs.append(Document(path.name, data, extract(data, path.name)))
    return docs


def load_golden(corpus: Sequence[Document], path: Path = GOLDEN) -> tuple[list[Question], list[Question]]:
    """(answerable, unanswerable); GoldenError if a question names a missing file or an answer not in its text."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    texts = {d.name: "\n".join(s.text for s in d.extracted.sections) for d in corpus}
    answerable = []
    for item in raw["questions"]:
        docs, answers = _check_answers(path, item, texts)
        answerable.append(Question(str(item["q"]), item["lang"], docs, answers))
    unanswerable = [Question(str(item["q"]), item["lang"]) for item in raw["unanswerable"]]
    return answerable, unanswerable


@dataclass(frozen=True)
class Turn:
    """A question asked after another in the same conversation (golden follow_ups and topic_switches)."""

    prev: str
    question: Question


def _check_answers(path: Path, item: dict, texts: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    docs = tuple(item["doc"]) if isinstance(item["doc"], list) else (item["doc"],)
    answers = tuple(str(a) for a in item["answer"])
    for name in docs:
        if name not in texts:
            raise GoldenError(f"{path.name}: question {item['q']!r} names {name}, which is not in {CORPUS}")
    for a in answers:
        if not any(a in texts[name] for name in docs):
            raise GoldenError(f"{path.name}: question {item['q']!r}: answer {a!r} occurs in none of {', '.join(docs)}")
    return docs, answers


def load_turns(corpus: Sequence[Document], path: Path = GOLDEN) -> tuple[list[Turn], list[Turn]]:
    """(follow_ups, topic_switches): each question with the one asked before it; GoldenError as load_golden."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    texts = {d.name: "\n".join(s.text for s in d.extracted.sections) for d in corpus}
    out = []
    for section in ("follow_ups", "topic_switches"):
        turns = []
        for item in raw.get(section) or []:
            docs, answers = _check_answers(path, item, texts)
            turns.append(Turn(str(item["prev"]), Question(str(item["q"]), item["lang"], docs, answers)))
        out.append(turns)
    return out[0], out[1]


def chunked(corpus: Sequence[Document], size: int, overlap: int) -> dict[str, list]:
    return {d.name: chunk(d.extracted.sections, size, overlap) for d in corpus}


@contextlib.contextmanager
def passage_only() -> Iterator[None]:
    """Experiment: indexes built inside index each passage's text alone, without its heading path (the product indexes
    the heading path with it: terms.token_source). Bench only: flips terms.INDEX_HEADINGS for the duration."""
    old = terms.INDEX_HEADINGS
    terms.INDEX_HEADINGS = False
    try:
        yield
    finally:
        terms.INDEX_HEADINGS = old


@contextlib.contextmanager
def porter_stemming() -> Iterator[None]:
    """Experiment: indexes created inside declare FTS5 `tokenize='porter unicode61 ...'` (English stems; CJK tokens
    pass through unchanged). Bench only: swaps the store's schema text for the duration."""
    old = index_file.SCHEMA
    if STORE_TOKENIZE not in old:
        raise RuntimeError(f"store schema no longer declares {STORE_TOKENIZE!r}; update the porter experiment")
    index_file.SCHEMA = old.replace(STORE_TOKENIZE, "tokenize = 'porter unicode61 remove_diacritics 2'")
    try:
        yield
    finally:
        index_file.SCHEMA = old


STORE_TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"


def build_index(
    path: Path, corpus: Sequence[Document], tokenizer: str, size: int, overlap: int,
    embed: Callable[[list[str]], list[list[float]]] | None = None, *, heading: bool = True, porter: bool = False,
) -> Index:  # fmt: skip
    with contextlib.ExitStack() as stack:
        if porter:
            stack.enter_context(porter_stemming())
        if not heading:
            stack.enter_context(passage_only())
        index = Index(path, tokenizer=tokenizer)
        for d in corpus:
            chunks = chunk(d.extracted.sections, size, overlap)
            vectors = embed([c.text for c in chunks]) if embed else None
            index.add(
                d.name, hashlib.sha256(d.data).hexdigest(), len(d.data), d.extracted.kind, chunks, pages=d.extracted.pages, vectors=vectors
            )
    return index


def answer_rank(hits: Sequence[Hit], question: Question) -> int | None:
    """1-based rank of the first hit that answers the question, or None."""
    for rank, h in enumerate(hits, 1):
        if h.file in question.docs and any(a in h.text for a in question.answers):
            return rank
    return None


def score(ranks: Sequence[int | None]) -> Scores:
    n = len(ranks)
    if n == 0:
        return Scores(0, 0.0, 0.0, 0.0)
    return Scores(
        n,
        sum(1 for r in ranks if r is not None and r <= 1) / n,
        sum(1 for r in ranks if r is not None and r <= 3) / n,
        sum(1 / r for r in ranks if r is not None) / n,
    )


def evaluate(search: Callable[[str], list[Hit]], questions: Sequence[Question]) -> tuple[dict[str, Scores], dict[str, int | None]]:
    """Scores overall ("all") and per language, and each question's rank."""
    ranks = {q.q: answer_rank(search(q.q), q) for q in questions}
    out = {"all": score(list(ranks.values()))}
    for lang in LANGS:
        out[lang] = score([ranks[q.q] for q in questions if q.lang == lang])
    return out, ranks


def best_coverage(index: Index, question: str, k: int) -> float:
    """What retrieve.Retriever gates on: the highest Hit.coverage among the top k lexical hits (0 when none)."""
    return max((h.coverage for h in index.search(question, Scope(), k=k)), default=0.0)


@dataclass(frozen=True)
class GateRow:
    threshold: float
    kept: dict[str, float]  # answerable questions let through, per language and "all"
    refused: dict[str, float]  # unanswerable questions refused
    kept_answered: float  # answerable let through AND answered in the top k (what the user then gets)

    @property
    def balanced(self) -> float:
        return (self.kept["all"] + self.refused["all"]) / 2


def calibrate(
    answerable: Sequence[Question], unanswerable: Sequence[Question], cov_a: dict[str, float], cov_u: dict[str, float],
    answered: dict[str, bool], thresholds: Sequence[float] = THRESHOLDS,
) -> list[GateRow]:  # fmt: skip
    rows = []
    for t in thresholds:
        kept, refused = {}, {}
        for lang in (*LANGS, "all"):
            qa = [q for q in answerable if lang in ("all", q.lang)]
            qu = [q for q in unanswerable if lang in ("all", q.lang)]
            kept[lang] = sum(cov_a[q.q] >= t for q in qa) / len(qa) if qa else 0.0
            refused[lang] = sum(cov_u[q.q] < t for q in qu) / len(qu) if qu else 0.0
        ka = sum(cov_a[q.q] >= t and answered[q.q] for q in answerable) / len(answerable)
        rows.append(GateRow(t, kept, refused, ka))
    return rows


def suggest(rows: Sequence[GateRow]) -> GateRow:
    """The threshold with the best balanced accuracy (kept + refused) / 2; among equals the lowest (prefer answering)."""
    return max(rows, key=lambda r: (round(r.balanced, 6), -r.threshold))


@dataclass(frozen=True)
class TurnScores:
    n: int
    r3_before: float  # recall@3 of the newest message searched alone (what retrieval did before follow-ups)
    r3_after: float  # recall@3 with the conversation (Retriever.search's `previous`)
    answered_before: float  # past the relevance gate AND answered in the top 3
    answered_after: float


def turn_ranks(retriever: Retriever, turns: Sequence[Turn], k: int) -> dict[str, list[tuple[int | None, bool]]]:
    """Per turn, (answer rank, gate passed) for the message alone ("before") and with its previous question ("after")."""
    out: dict[str, list[tuple[int | None, bool]]] = {"before": [], "after": []}
    for t in turns:
        for key, previous in (("before", ()), ("after", (t.prev,))):
            found = retriever.search(t.question.q, Scope(), k=k, previous=previous)
            out[key].append((answer_rank(found.ranked, t.question), found.answerable))
    return out


def turn_scores(retriever: Retriever, turns: Sequence[Turn], k: int) -> dict[str, TurnScores]:
    """TurnScores overall ("all") and per language."""
    ranks = turn_ranks(retriever, turns, k)
    out = {}
    for lang in (*LANGS, "all"):
        idx = [i for i, t in enumerate(turns) if lang in ("all", t.question.lang)]
        n = len(idx) or 1

        def share(key: str, gated: bool, idx: list[int] = idx, n: int = n) -> float:
            return sum(1 for i in idx if (r := ranks[key][i][0]) is not None and r <= 3 and (ranks[key][i][1] or not gated)) / n

        out[lang] = TurnScores(len(idx), share("before", False), share("after", False), share("before", True), share("after", True))
    return out


def conversation_turns(answerable: Sequence[Question]) -> list[Turn]:
    """The golden questions asked one after another (each after the one listed before it): self-contained questions
    in a conversation, mostly a change of subject, which the history must not make worse."""
    return [Turn(answerable[i - 1].q if i else "", q) for i, q in enumerate(answerable)]


def refused_in_a_row(retriever: Retriever, unanswerable: Sequence[Question], answerable: Sequence[Question]) -> tuple[float, float]:
    """Share of the unanswerable questions the gate refuses alone, and asked after a golden question (the i-th after
    the i-th): a history must not let more of them through."""
    before = sum(not retriever.search(q.q, Scope()).answerable for q in unanswerable)
    after = sum(
        not retriever.search(q.q, Scope(), previous=(answerable[i % len(answerable)].q,)).answerable for i, q in enumerate(unanswerable)
    )
    return before / len(unanswerable), after / len(unanswerable)


def follow_up_table(
    index: Index, cfg: DocsConfig, follow_ups: Sequence[Turn], switches: Sequence[Turn], answerable: Sequence[Question],
    unanswerable: Sequence[Question] = (),
):  # fmt: skip
    """The follow-up table (rich): recall@3 and answered@3 before/after, per set and language (with unanswerable
    questions: the share refused, as "refused before/after" in the caption); and the scores ("refused": the pair)."""
    from rich.table import Table

    retriever = Retriever(index, cfg)
    sets = {
        "follow-ups": follow_ups,
        "topic switches": switches,
        "golden questions in a row": conversation_turns(answerable),
    }
    scores = {name: turn_scores(retriever, turns, cfg.top_k) for name, turns in sets.items()}
    t = Table(title=f"Questions in a conversation (top_k {cfg.top_k}, recall@3; answered = past the gate and in the top 3)",
              title_justify="left")  # fmt: skip
    for c in ("set", "lang", "n", "R@3 before", "R@3 after", "answered before", "answered after"):
        t.add_column(c, justify="right" if c not in ("set", "lang") else "left")
    for name, by_lang in scores.items():
        for lang in (*LANGS, "all"):
            s = by_lang[lang]
            t.add_row(name, lang, str(s.n), _fmt(s.r3_before), _fmt(s.r3_after), _fmt(s.answered_before), _fmt(s.answered_after))
    if unanswerable:
        before, after = refused_in_a_row(retriever, unanswerable, answerable)
        scores["refused"] = (before, after)  # type: ignore[assignment]
        t.caption = (
            f"unanswerable questions ({len(unanswerable)}) after a golden question: refused before {_fmt(before)}, after {_fmt(after)}"
        )
        t.caption_justify = "left"
    return t, scores


# ---- the run ------------------------------------------------------------------------------------


def source_state() -> str:
    """The commit the bench ran on, and whether ernie_ops/docs had uncommitted changes (numbers depend on them)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "ernie_ops/docs"], capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    changed = [line[3:] for line in dirty.splitlines()]
    return head + (f" + uncommitted changes in {', '.join(changed)}" if changed else "")


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _scores_row(name: str, s: dict[str, Scores], seconds: float | None = None) -> list[str]:
    row = [name]
    for key in ("all", *LANGS):
        row += [_fmt(s[key].r1), _fmt(s[key].r3), _fmt(s[key].mrr)]
    if seconds is not None:
        row.append(f"{seconds:.1f}")
    return row


def _scores_table(title: str, first: str, extra: str | None = None):
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column(first)
    for key in ("all", *LANGS):
        for m in ("R@1", "R@3", "MRR"):
            t.add_column(f"{key} {m}", justify="right")
    if extra:
        t.add_column(extra, justify="right")
    return t


def _embedder(url: str, model: str, batch: int) -> Callable[[list[str]], list[list[float]]]:
    from ernie_ops.docs.embed import EmbeddingClient

    return EmbeddingClient(url, model, 120.0, batch_size=batch).embed_sync


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    cfg = DocsConfig()
    p = argparse.ArgumentParser(prog="python -m benchmarks.docs_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=10, help="hits retrieved per question for recall/MRR (default 10)")
    p.add_argument("--tokenizers", default=",".join(tokens.TOKENIZERS), help="comma-separated (default: all of tokens.TOKENIZERS)")
    p.add_argument("--size", type=int, default=cfg.chunk_chars, help="chunk size for the tokenizer table (default: the product's)")
    p.add_argument("--overlap", type=int, default=cfg.overlap_chars)
    p.add_argument("--sizes", default=",".join(f"{s}/{o}" for s, o in SWEEP), help="size/overlap pairs to sweep")
    p.add_argument("--gate-tokenizer", default=None, help="tokenizer for the gate calibration (default: the best one)")
    p.add_argument(
        "--embeddings", nargs=2, metavar=("URL", "MODEL"), help="an OpenAI /v1/embeddings server and its model: adds dense and fused rows"
    )
    p.add_argument("--no-experiments", action="store_true", help="skip the -heading / +porter experiment rows")
    p.add_argument("--misses", action="store_true", help="list the questions the best tokenizer does not answer in the top 3")
    a = p.parse_args(argv)
    names = [t.strip() for t in a.tokenizers.split(",") if t.strip()]
    for t in names:
        if t not in tokens.TOKENIZERS:
            p.error(f"--tokenizers: unknown {t!r}; known: {', '.join(tokens.TOKENIZERS)}")
    try:
        sweep = [tuple(int(x) for x in pair.split("/")) for pair in a.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes: {a.sizes!r} is not a list like 200/40,400/80")

    con = Console(width=max(Console().width, 140))
    corpus = load_corpus()
    try:
        answerable, unanswerable = load_golden(corpus)
    except GoldenError as exc:
        con.print(f"[red]{exc}[/red]")
        return 2
    n_chunks = len([c for cs in chunked(corpus, a.size, a.overlap).values() for c in cs])
    params = Table(title="Run", title_justify="left", show_header=False)
    params.add_column()
    params.add_column()
    words = sum(len(s.text) for d in corpus for s in d.extracted.sections)
    params.add_row(
        "corpus", f"{len(corpus)} files ({', '.join(sorted({d.extracted.kind for d in corpus}))}), {words:,} characters, {CORPUS}"
    )
    params.add_row(
        "golden",
        f"{len(answerable)} questions ({', '.join(f'{sum(q.lang == lg for q in answerable)} {lg}' for lg in LANGS)}), "
        f"{len(unanswerable)} unanswerable",
    )
    params.add_row("chunking", f"{a.size}/{a.overlap} characters -> {n_chunks} passages (tokenizer table)")
    params.add_row("retrieval", f"Index.search k={a.k}; gate over the top {cfg.top_k} (chat.docs.top_k)")
    params.add_row(
        "product defaults",
        f"tokenizer={cfg.tokenizer} chunk_chars={cfg.chunk_chars} overlap_chars={cfg.overlap_chars} min_coverage={cfg.min_coverage}",
    )
    params.add_row("source", source_state())
    params.add_row("python / sqlite", f"{sys.version.split()[0]} / {__import__('sqlite3').sqlite_version}")
    con.print(params)

    embed = _embedder(*a.embeddings, DocsConfig().embeddings.batch_size) if a.embeddings else None
    results: dict[str, tuple[dict[str, Scores], dict[str, int | None]]] = {}
    with tempfile.TemporaryDirectory(prefix="docs-quality-") as tmp:
        table = _scores_table(f"Tokenizers (chunks {a.size}/{a.overlap}, recall@n and MRR@{a.k})", "tokenizer", "build s")
        for name in names:
            t0 = time.perf_counter()
            index = build_index(Path(tmp) / f"{name}.sqlite", corpus, name, a.size, a.overlap)
            built = time.perf_counter() - t0
            results[name] = evaluate(lambda q, index=index: index.search(q, Scope(), k=a.k), answerable)
            index.close()
            table.add_row(*_scores_row(("whitespace (baseline)" if name == "whitespace" else name), results[name][0], built))
        best = max(
            [n for n in names if n != "whitespace"] or names,
            key=lambda n: (results[n][0]["all"].r3, results[n][0]["all"].mrr, results[n][0]["zh"].r3),
        )
        if not a.no_experiments:
            for label, kw in (
                ("-heading", {"heading": False}),
                ("+porter", {"porter": True}),
                ("-heading+porter", {"heading": False, "porter": True}),
            ):
                for name in dict.fromkeys([cfg.tokenizer, best]):
                    t0 = time.perf_counter()
                    index = build_index(Path(tmp) / f"{name}{label}.sqlite", corpus, name, a.size, a.overlap, **kw)
                    built = time.perf_counter() - t0
                    s, _ = evaluate(lambda q, index=index: index.search(q, Scope(), k=a.k), answerable)
                    index.close()
                    table.add_row(*_scores_row(f"{name} {label} (experiment)", s, built))
        con.print(table)
        con.print(f"best tokenizer by recall@3 (then MRR): [bold]{best}[/bold]\n")

        if a.misses:
            miss = Table(title=f"Not answered in the top 3 by {best}", title_justify="left")
            for c in ("lang", "question", "rank"):
                miss.add_column(c)
            for q in answerable:
                r = results[best][1][q.q]
                if r is None or r > 3:
                    miss.add_row(q.lang, q.q, str(r or "-"))
            con.print(miss)

        sweep_table = _scores_table(f"Chunk size/overlap sweep ({best})", "size/overlap", "passages")
        for size, overlap in sweep:
            index = build_index(Path(tmp) / f"sweep-{size}-{overlap}.sqlite", corpus, best, size, overlap)
            s, _ = evaluate(lambda q, index=index: index.search(q, Scope(), k=a.k), answerable)
            count = index.stats().chunks
            index.close()
            sweep_table.add_row(*_scores_row(f"{size}/{overlap}", s), str(count))
        con.print(sweep_table)

        gate_tok = a.gate_tokenizer or best
        index = build_index(Path(tmp) / "gate.sqlite", corpus, gate_tok, a.size, a.overlap, embed=embed)
        if embed is not None:
            dense_table = _scores_table(f"Dense and fused ({gate_tok}, chunks {a.size}/{a.overlap})", "ranking")

            def dense(q: str) -> list[Hit]:
                return index.search_dense(embed([q])[0], Scope(), k=a.k)

            def fused(q: str) -> list[Hit]:
                return rrf([index.search(q, Scope(), k=a.k), dense(q)], weights=[1.0, cfg.embeddings.weight])[: a.k]

            dense_table.add_row(*_scores_row("lexical", evaluate(lambda q: index.search(q, Scope(), k=a.k), answerable)[0]))
            dense_table.add_row(*_scores_row("dense", evaluate(dense, answerable)[0]))
            dense_table.add_row(*_scores_row(f"fused (rrf, dense weight {cfg.embeddings.weight:g})", evaluate(fused, answerable)[0]))
            con.print(dense_table)

        follow_ups, switches = load_turns(corpus)
        product = build_index(Path(tmp) / "product.sqlite", corpus, cfg.tokenizer, cfg.chunk_chars, cfg.overlap_chars)
        con.print(follow_up_table(product, cfg, follow_ups, switches, answerable, unanswerable)[0])
        product.close()

        cov_a = {q.q: best_coverage(index, q.q, cfg.top_k) for q in answerable}
        cov_u = {q.q: best_coverage(index, q.q, cfg.top_k) for q in unanswerable}
        answered = {q.q: answer_rank(index.search(q.q, Scope(), k=cfg.top_k), q) is not None for q in answerable}
        index.close()
    rows = calibrate(answerable, unanswerable, cov_a, cov_u, answered)
    pick = suggest(rows)
    gate = Table(
        title=f"Relevance gate: best Hit.coverage in the top {cfg.top_k} ({gate_tok}, chunks {a.size}/{a.overlap})", title_justify="left"
    )
    for c in ("min_coverage", "kept all", "kept zh", "kept en", "refused all", "refused zh", "refused en", "kept+answered", "balanced"):
        gate.add_column(c, justify="right")
    for r in rows:
        mark = " *" if r is pick else (" (default)" if abs(r.threshold - cfg.min_coverage) < 1e-9 else "")
        gate.add_row(
            f"{r.threshold:.2f}{mark}", *(_fmt(r.kept[k]) for k in ("all", *LANGS)), *(_fmt(r.refused[k]) for k in ("all", *LANGS)),
            _fmt(r.kept_answered), _fmt(r.balanced),
        )  # fmt: skip
    con.print(gate)
    spread = Table(title="Best coverage distribution", title_justify="left")
    for c in ("questions", "min", "p10", "median", "p90", "max"):
        spread.add_column(c, justify="right")
    for label, values in (("answerable", list(cov_a.values())), ("unanswerable", list(cov_u.values()))):
        v = sorted(values)
        q = statistics.quantiles(v, n=10) if len(v) > 1 else v * 9
        spread.add_row(label, _fmt(v[0]), _fmt(q[0]), _fmt(statistics.median(v)), _fmt(q[-1]), _fmt(v[-1]))
    con.print(spread)
    con.print(
        f"suggested min_coverage: [bold]{pick.threshold:.2f}[/bold] (kept {pick.kept['all']:.3f} of answerable, refused "
        f"{pick.refused['all']:.3f} of unanswerable; the product default is {cfg.min_coverage})"
    )
    over = sorted((c, q) for q, c in cov_u.items() if c >= pick.threshold)
    if over:
        con.print("unanswerable questions let through at that threshold: " + "; ".join(f"{q} ({c:.2f})" for c, q in over))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
