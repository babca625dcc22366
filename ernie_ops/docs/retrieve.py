"""A question -> the passages to answer it from, or the verdict that the documents do not answer it.

Lexical ranking (FTS5 BM25 over the CJK-aware tokens) always; with `chat.docs.embeddings` on, a dense
ranking from the embedding server too, fused by reciprocal rank. The relevance gate is lexical: the
best passage must hold at least `min_coverage` of the question's terms (IDF-weighted), calibrated
on the golden set's answerable and unanswerable questions (benchmarks/docs_quality.py). Below it the
chat app says so and does not call the model: a small model given unrelated passages answers anyway.

A follow-up ("那它保留多久？" after a question about logs; followup.is_follow_up) is also searched together with the
question(s) it follows; that ranking leads the fusion, the message's own ranking is added at OWN_WEIGHT, and the gate
takes the best coverage of either. A self-contained question is searched alone, history or not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ernie_ops.docs import followup
from ernie_ops.docs.config import DocsConfig
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
    context: list[str] = field(default_factory=list)  # the earlier questions a follow-up was searched with
    ranked: list[Hit] = field(default_factory=list)  # the fused ranking, given or not (benchmarks measure it apart from the gate)

    def as_dict(self) -> dict:
        return {
            "answerable": self.answerable,
            "best_coverage": round(self.best_coverage, 3),
            "seconds": round(self.seconds, 4),
            "context": self.context,
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


# A follow-up's own ranking next to the ranking of it searched with the question(s) it follows: the context ranking
# leads (the follow-up alone often names no subject), the message's own still lifts the passages that match what it
# newly asks and keeps a wrongly detected change of subject near its own passages (benchmarks/docs_quality.py,
# follow-up table, 27 follow-ups: recall@3 0.963 at 0.25, 0.5 and 0.75, 0.926 at 1.0; no golden question in a row
# and no topic switch worse than alone at any of them).
OWN_WEIGHT = 0.5


class Retriever:
    def __init__(self, index: Index, cfg: DocsConfig, embed=None):
        self.index, self.cfg, self.embed = index, cfg, embed

    def search(self, question: str, scope: Scope, k: int | None = None, previous: Sequence[str] = ()) -> Retrieved:
        """`previous`: the conversation's earlier user questions, oldest first; a follow-up is searched with them
        (followup.context), a self-contained question alone."""
        k = k or self.cfg.top_k
        t0 = time.perf_counter()
        earlier = followup.context(question, previous)
        lexical = self.index.search(question, scope, k=k)
        rankings = {"lexical": len(lexical)}
        lists, weights, query = [lexical], [1.0], question
        if earlier:
            query = "\n".join([*earlier, question])
            with_context = [replace(h, ranks={"context": h.ranks.get("lexical", 0)}) for h in self.index.search(query, scope, k=k)]
            rankings["context"] = len(with_context)
            lists, weights = [with_context, lexical], [1.0, OWN_WEIGHT]
        best = max((h.coverage for hits in lists for h in hits), default=0.0)
        if self.embed is not None and query.strip():
            try:
                dense = self.index.search_dense(self.embed([query])[0], scope, k=k)
            except ErnieOpsError as exc:  # the embedding server is down: the lexical ranking alone still answers
                log.warning("docs: dense retrieval skipped, lexical only: %s", exc)
                dense = None
            if dense is not None:
                rankings["dense"] = len(dense)
                lists, weights = [*lists, dense], [*weights, self.cfg.embeddings.weight]
        hits = rrf(lists, weights=weights)[:k] if len(lists) > 1 else lexical
        answerable = any(lists[: 2 if earlier else 1]) and best >= self.cfg.min_coverage
        return Retrieved(hits if answerable else [], answerable, best, time.perf_counter() - t0, rankings, lists[0], earlier, hits)
