"""A question -> the passages to answer it from, or the verdict that the documents do not answer it.

Lexical ranking (FTS5 BM25 over the CJK-aware tokens) always; with `chat.docs.embeddings` on, a dense
ranking from the embedding server too, fused by reciprocal rank. The relevance gate is lexical: the
best passage must hold at least `min_coverage` of the question's terms (IDF-weighted), calibrated
on the golden set's answerable and unanswerable questions (benchmarks/docs_quality.py). Below it the
chat app says so and does not call the model: a small model given unrelated passages answers anyway.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ernie_ops.config import DocsConfig
from ernie_ops.docs.fusion import rrf
from ernie_ops.docs.model import Hit
from ernie_ops.docs.store import Index, Scope
from ernie_ops.errors import ErnieOpsError

log = logging.getLogger("ernie_ops.docs")


@dataclass
class Retrieved:
    hits: list[Hit]
    answerable: bool
    best_coverage: float
    seconds: float = 0.0
    rankings: dict[str, int] = field(default_factory=dict)  # how many hits each ranking gave
    lexical: list[Hit] = field(default_factory=list)  # the lexical ranking, given or not (the CLI shows it below the gate)

    def as_dict(self) -> dict:
        return {
            "answerable": self.answerable,
            "best_coverage": round(self.best_coverage, 3),
            "seconds": round(self.seconds, 4),
            "hits": [hit_dict(h) for h in self.hits],
        }


def hit_dict(h: Hit) -> dict:
    return {
        "file": h.file, "collection": h.collection, "page": h.page, "heading": " > ".join(h.heading) or None,
        "score": round(h.score, 4), "coverage": round(h.coverage, 3), "start": h.start, "end": h.end, "ranks": h.ranks,
        "text": h.text,
    }  # fmt: skip


def allowed_collections(cfg: DocsConfig, user: str, known: list[str]) -> list[str]:
    """The shared collections `user` may search: a collection not listed under chat.docs.collections is open to all."""
    out = []
    for name in known:
        access = cfg.collections.get(name)
        if access is None or "*" in access.readers or user in access.readers:
            out.append(name)
    return out


class Retriever:
    def __init__(self, index: Index, cfg: DocsConfig, embed=None):
        self.index, self.cfg, self.embed = index, cfg, embed

    def search(self, question: str, scope: Scope, k: int | None = None) -> Retrieved:
        k = k or self.cfg.top_k
        t0 = time.perf_counter()
        lexical = self.index.search(question, scope, k=k)
        best = max((h.coverage for h in lexical), default=0.0)
        rankings = {"lexical": len(lexical)}
        hits = lexical
        if self.embed is not None and question.strip():
            try:
                dense = self.index.search_dense(self.embed([question])[0], scope, k=k)
            except ErnieOpsError as exc:  # the embedding server is down: the lexical ranking alone still answers
                log.warning("docs: dense retrieval skipped, lexical only: %s", exc)
                dense = None
            if dense is not None:
                rankings["dense"] = len(dense)
                hits = rrf([lexical, dense], weights=[1.0, self.cfg.embeddings.weight])[:k]
        answerable = bool(lexical) and best >= self.cfg.min_coverage
        return Retrieved(hits if answerable else [], answerable, best, time.perf_counter() - t0, rankings, lexical)
