"""Reciprocal-rank fusion (ernie_ops.docs.fusion.rrf): merged passages, per-list ranks, weights, stable ties."""

from __future__ import annotations

import pytest

from ernie_ops.docs.fusion import rrf
from ernie_ops.docs.model import Hit


def _hit(cid: int, ranking: str | None = None, rank: int = 1, score: float = 9.0, coverage: float = 0.0) -> Hit:
    return Hit(cid, cid * 10, "c", f"f{cid}.md", f"text {cid}", score, ranks={ranking: rank} if ranking else {}, coverage=coverage)


def test_a_passage_in_both_lists_is_merged_with_each_lists_rank_and_the_summed_score():
    lexical = [_hit(1, "lexical", 1, coverage=0.8), _hit(2, "lexical", 2, coverage=0.5), _hit(3, "lexical", 3, coverage=0.2)]
    dense = [_hit(3, "dense", 1), _hit(4, "dense", 2), _hit(1, "dense", 3)]
    fused = rrf([lexical, dense], k=60)
    assert [h.chunk_id for h in fused] == [1, 3, 2, 4]
    one, three, two, four = fused
    assert one.score == pytest.approx(1 / 61 + 1 / 63) and one.ranks == {"lexical": 1, "dense": 3}
    assert three.score == pytest.approx(1 / 63 + 1 / 61) and three.ranks == {"lexical": 3, "dense": 1}
    assert two.ranks == {"lexical": 2} and four.ranks == {"dense": 2}
    assert (one.coverage, three.coverage, four.coverage) == (0.8, 0.2, 0.0)  # the lexical list's coverage is kept
    assert (one.file, one.text, one.doc_id) == ("f1.md", "text 1", 10)


def test_ties_keep_the_order_of_first_appearance():
    a = [_hit(5), _hit(6)]
    b = [_hit(6), _hit(5)]
    assert [h.chunk_id for h in rrf([a, b])] == [5, 6]
    assert [h.chunk_id for h in rrf([b, a])] == [6, 5]
    assert [h.ranks for h in rrf([a, b])] == [{"1": 1, "2": 2}, {"1": 2, "2": 1}]  # unnamed lists: by position


def test_weights_tip_the_balance():
    lexical = [_hit(1, "lexical"), _hit(2, "lexical", 2)]
    dense = [_hit(2, "dense"), _hit(1, "dense", 2)]
    assert [h.chunk_id for h in rrf([lexical, dense], weights=[1.0, 2.0])] == [2, 1]
    assert [h.chunk_id for h in rrf([lexical, dense], weights=[2.0, 1.0])] == [1, 2]
    assert [h.chunk_id for h in rrf([lexical, dense], weights=[1.0, 0.0])] == [1, 2]


def test_a_passage_listed_twice_in_one_list_counts_once_at_its_best_rank():
    fused = rrf([[_hit(1), _hit(2), _hit(1)]], k=0)
    assert [(h.chunk_id, h.score) for h in fused] == [(1, 1.0), (2, 0.5)]


def test_empty_and_mismatched_input():
    assert rrf([]) == [] and rrf([[], []]) == []
    with pytest.raises(ValueError, match="rrf: 1 weights for 2 rankings"):
        rrf([[], []], weights=[1.0])
    with pytest.raises(ValueError, match="k must be >= 0"):
        rrf([[]], k=-1)
