"""Reciprocal-rank fusion of ranked hit lists (lexical, dense): score(p) = sum_i w_i / (k + rank_i(p)).

The same passage (chunk_id) in several lists is merged into one Hit: its `ranks` hold every list's
1-based rank (named by the hit's own rank name, e.g. "lexical"/"dense", else the list's position
"1", "2", ...), its score is the fused score, its coverage the highest any list gave it (only the
lexical list computes coverage). Ties keep the order of first appearance (list by list, rank by rank),
so the result is deterministic.
"""

from __future__ import annotations

from dataclasses import replace

from ernie_ops.docs.model import Hit


def rrf(rankings: list[list[Hit]], k: int = 60, weights: list[float] | None = None) -> list[Hit]:
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"rrf: {len(weights)} weights for {len(rankings)} rankings")
    if k < 0:
        raise ValueError(f"rrf: k must be >= 0, not {k}")
    score: dict[int, float] = {}
    first: dict[int, Hit] = {}
    ranks: dict[int, dict[str, int]] = {}
    coverage: dict[int, float] = {}
    for i, (hits, weight) in enumerate(zip(rankings, weights, strict=True), 1):
        seen: set[int] = set()
        for rank, hit in enumerate(hits, 1):
            cid = hit.chunk_id
            if cid in seen:  # a list naming a passage twice counts it once, at its best rank
                continue
            seen.add(cid)
            name = next(iter(hit.ranks)) if len(hit.ranks) == 1 else str(i)
            first.setdefault(cid, hit)
            score[cid] = score.get(cid, 0.0) + weight / (k + rank)
            ranks.setdefault(cid, {})[name] = rank
            coverage[cid] = max(coverage.get(cid, 0.0), hit.coverage)
    order = {cid: n for n, cid in enumerate(first)}
    fused = sorted(first, key=lambda cid: (-score[cid], order[cid]))
    return [replace(first[cid], score=score[cid], ranks=ranks[cid], coverage=coverage[cid]) for cid in fused]
