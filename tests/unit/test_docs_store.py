"""The document index (ernie_ops.docs.store) on real SQLite files: scope isolation inside the ranked
query, atomic replace, cascading removes (FTS rows and vectors too), two processes writing at once,
a damaged file kept aside, foreign/newer files refused untouched, WAL, reopening, hostile questions,
coverage, a tokenizer change, and the dense path on real sqlite-vec with hand-made vectors.
"""

from __future__ import annotations

import math
import multiprocessing
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from ernie_ops.docs import index_file, index_search, store, terms
from ernie_ops.docs.model import Chunk
from ernie_ops.docs.store import Index, Scope, StoreError
from ernie_ops.files import sqlite_file
from tests.harness import sqlite_damage


def _chunks(*texts: str, page: int | None = None, heading: tuple[str, ...] = ()) -> list[Chunk]:
    out, pos = [], 0
    for i, t in enumerate(texts):
        out.append(Chunk(t, i, pos, pos + len(t), page=page, heading=heading))
        pos += len(t)
    return out


def _add(index: Index, name: str, *texts: str, **kw) -> int:
    return index.add(name, "sha-" + name, sum(len(t) for t in texts), "text", _chunks(*texts), **kw)


def _raw(path: Path, sql: str, params=()) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def index(tmp_path):
    idx = Index(tmp_path / "docs.sqlite")
    yield idx
    idx.close()


# ---- scope ---------------------------------------------------------------------------------------


def _files(hits) -> set[str]:
    return {h.file for h in hits}


def test_scope_shared_collections_and_exactly_one_owners_conversation(index):
    _add(index, "hr.md", "年假 每年 十五天", collection="hr")
    _add(index, "it.md", "年假 期间 VPN 不可用", collection="it")
    _add(index, "alice-c1.md", "alice 的年假 安排", owner="alice", conversation="c1")
    _add(index, "alice-c2.md", "alice 另一个对话 年假", owner="alice", conversation="c2")
    _add(index, "alice-nc.md", "alice 无对话 年假", owner="alice")
    _add(index, "bob-c1.md", "bob 的年假 安排", owner="bob", conversation="c1")
    q = "年假"
    assert _files(index.search(q, Scope(["hr"], "alice", "c1"), k=10)) == {"hr.md", "alice-c1.md"}
    assert _files(index.search(q, Scope(None, "bob", "c1"), k=10)) == {"hr.md", "it.md", "bob-c1.md"}
    assert _files(index.search(q, Scope(None, "alice", None), k=10)) == {"hr.md", "it.md", "alice-nc.md"}
    assert _files(index.search(q, Scope(), k=10)) == {"hr.md", "it.md"}
    assert _files(index.search(q, Scope([], "alice", "c2"), k=10)) == {"alice-c2.md"}
    assert index.search(q, Scope([]), k=10) == []
    assert {d.name for d in index.documents(Scope(["it"], "bob", "c1"))} == {"it.md", "bob-c1.md"}
    assert len(index.documents()) == 6
    assert [(c.name, c.documents, c.chunks) for c in index.collections()] == [("hr", 1, 1), ("it", 1, 1)]


def test_another_owners_big_corpus_cannot_push_the_callers_hits_out_of_the_top_k(index):
    for i in range(40):  # bob's passages match the question far better than alice's
        _add(index, f"bob-{i}.md", "部署 升级 回滚 部署 升级 回滚", owner="bob", conversation="c")
    _add(index, "alice.md", "很长的一段关于别的事情的文字 其中 提到 升级 一次 以及 很多 其他 无关 内容", owner="alice", conversation="c")
    hits = index.search("部署升级回滚", Scope([], "alice", "c"), k=3)
    assert [h.file for h in hits] == ["alice.md"]


# ---- writing -------------------------------------------------------------------------------------


def test_add_replaces_the_same_name_in_the_same_place_only(index):
    first = _add(index, "guide.md", "旧版本 说明 alpha")
    _add(index, "guide.md", "另一个集合 alpha", collection="other")
    _add(index, "guide.md", "alice 的 alpha", owner="alice", conversation="c")
    second = _add(index, "guide.md", "新版本 说明 beta", "第二段 beta")
    assert second != first
    assert index.search("alpha", Scope(["default"]), k=5) == []
    assert sorted(h.text for h in index.search("beta", Scope(["default"]), k=5)) == ["新版本 说明 beta", "第二段 beta"]
    doc = index.find("guide.md")
    assert (doc.doc_id, doc.chunks, doc.sha256) == (second, 2, "sha-guide.md")
    assert index.find("guide.md", "other").chunks == 1 and index.find("guide.md", "default", "alice", "c").chunks == 1
    assert index.find("guide.md", "default", "alice", "c2") is None
    assert index.stats().chunks == 4 == _raw(index.path, "SELECT count(*) FROM fts")[0][0]


def test_a_replace_that_fails_midway_changes_nothing(index):
    """The second add fails inside its transaction (a NaN in the last vector, after the old rows were
    deleted and the new ones inserted): the old document must still be there, whole."""
    index.add("a.md", "s1", 10, "text", _chunks("gamma 旧的 一", "gamma 旧的 二"), vectors=[[1, 0, 0], [0, 1, 0]])
    before = (index.documents(), _raw(index.path, "SELECT rowid, tokens FROM fts ORDER BY rowid"))
    with pytest.raises(StoreError, match=r"a\.md: vector 3 holds a value that is not a finite number"):
        index.add(
            "a.md", "s2", 10, "text", _chunks("delta 一", "delta 二", "delta 三"), vectors=[[1, 0, 0], [0, 1, 0], [0, float("nan"), 0]]
        )
    assert (index.documents(), _raw(index.path, "SELECT rowid, tokens FROM fts ORDER BY rowid")) == before
    assert len(index.search("gamma", Scope(), k=5)) == 2 and index.search("delta", Scope(), k=5) == []
    assert [h.text for h in index.search_dense([1, 0, 0], Scope(), k=1)] == ["gamma 旧的 一"]
    with pytest.raises(StoreError, match=r"a\.md: vector 1 has 2 dimensions but the index holds 3-dimensional vectors"):
        index.add("a.md", "s2", 10, "text", _chunks("delta"), vectors=[[1, 0]])
    assert index.documents() == before[0]


def test_add_refuses_a_conversation_without_owner_and_a_vector_count_mismatch(index):
    with pytest.raises(StoreError, match="needs its owner"):
        _add(index, "x.md", "text", conversation="c")
    with pytest.raises(StoreError, match=r"x\.md: 1 vectors for 2 passages"):
        index.add("x.md", "s", 1, "text", _chunks("a", "b"), vectors=[[1.0]])
    assert index.documents() == []


def test_remove_cascades_to_passages_fts_rows_and_vectors(index):
    keep = index.add("keep.md", "s", 1, "text", _chunks("epsilon keep"), vectors=[[0, 1]])
    gone = index.add("gone.md", "s", 1, "text", _chunks("zeta 一", "zeta 二"), vectors=[[1, 0], [1, 0.1]])
    assert index.remove(gone) is True
    assert index.remove(gone) is False
    assert [d.doc_id for d in index.documents()] == [keep]
    assert _raw(index.path, "SELECT count(*) FROM chunks") == [(1,)]
    assert _raw(index.path, "SELECT count(*) FROM fts") == [(1,)]
    assert _raw(index.path, "SELECT count(*) FROM texts") == [(1,)]
    assert _raw(index.path, "SELECT term, df FROM terms WHERE term IN ('zeta', 'epsilon')") == [("epsilon", 1)]
    assert _raw(index.path, "SELECT passages FROM totals") == [(1,)]
    assert index.search("zeta", Scope(), k=5) == []
    assert [h.file for h in index.search_dense([1, 0], Scope(), k=5)] == ["keep.md"]


def test_remove_conversation_removes_exactly_that_chats_uploads(index):
    _add(index, "a.md", "eta", owner="alice", conversation="c1")
    _add(index, "b.md", "eta", owner="alice", conversation="c1")
    _add(index, "c.md", "eta", owner="alice", conversation="c2")
    _add(index, "d.md", "eta", owner="bob", conversation="c1")
    _add(index, "e.md", "eta")
    assert index.remove_conversation("alice", "c1") == 2
    assert sorted(d.name for d in index.documents()) == ["c.md", "d.md", "e.md"]
    assert _raw(index.path, "SELECT count(*) FROM fts") == [(3,)]


def _writer(path: str, who: str, n: int, barrier) -> None:
    idx = Index(path)
    barrier.wait()
    for i in range(n):
        idx.add(f"{who}-{i}.md", "s", 1, "text", _chunks(f"{who} 文档 {i} theta", f"第二段 {i}"), owner=who, conversation="c")
    idx.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "docs.sqlite"
    Index(path).close()
    ctx = multiprocessing.get_context("fork")  # the children inherit this module: no re-import
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(str(path), who, 40, barrier)) for who in ("alice", "bob")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with Index(path) as idx:
        assert len(idx.documents()) == 80
        assert idx.stats().chunks == 160 == _raw(path, "SELECT count(*) FROM fts")[0][0]
        assert len(idx.search("theta", Scope([], "bob", "c"), k=100)) == 40


def test_a_writer_that_waits_too_long_gets_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(index_file, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "docs.sqlite"
    idx = Index(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        with pytest.raises(StoreError, match=r"docs\.sqlite is busy: another process has been writing it for over 0 s; try again"):
            _add(idx, "x.md", "text")
        assert idx.search("text", Scope(), k=1) == []  # reading is not blocked
    finally:
        other.execute("ROLLBACK")
        other.close()
    _add(idx, "x.md", "text")
    assert len(idx.documents()) == 1
    idx.close()


# ---- the file ------------------------------------------------------------------------------------


def test_wal_and_reopening_keeps_everything(tmp_path):
    path = tmp_path / "docs.sqlite"
    with Index(path) as idx:
        doc = idx.add("p.pdf", "abc", 123, "pdf", _chunks("第一页 iota", page=1, heading=("部署", "升级")), pages=3)
        assert Path(str(path) + "-wal").exists()
        assert _raw(path, "PRAGMA journal_mode") == [("wal",)]
    with Index(path) as idx:
        assert idx.warnings == []
        (d,) = idx.documents()
        assert (d.doc_id, d.name, d.sha256, d.size, d.kind, d.pages, d.chunks) == (doc, "p.pdf", "abc", 123, "pdf", 3, 1)
        (hit,) = idx.search("iota", Scope(), k=5)
        assert (hit.file, hit.page, hit.heading, hit.start, hit.end, hit.ranks) == ("p.pdf", 1, ("部署", "升级"), 0, 8, {"lexical": 1})
        st = idx.stats()
        assert (st.documents, st.chunks, st.tokenizer, st.dimension) == (1, 1, store.DEFAULT_TOKENIZER, None)
        assert st.bytes >= path.stat().st_size > 0


def _build(path: Path) -> None:
    with Index(path) as idx:
        for i in range(30):
            _add(idx, f"d{i}.md", f"kappa 文档 {i} " + "内容 " * 200)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.mark.parametrize("damage", sqlite_damage.KINDS)
def test_a_damaged_index_is_kept_aside_and_a_fresh_one_started(tmp_path, damage):
    path = tmp_path / "docs.sqlite"
    _build(path)
    data = sqlite_damage.damage_file(path, damage)
    with Index(path) as idx:
        (warning,) = idx.warnings
        (aside,) = tmp_path.glob("docs.sqlite.corrupt-*")
        assert re.fullmatch(r"docs\.sqlite\.corrupt-\d{8}T\d{6}Z", aside.name)
        assert aside.read_bytes() == data
        assert warning.startswith(f"the document index {path} was damaged (")
        assert warning.endswith(f"; kept it as {aside} and started an empty index: add the documents again")
        assert idx.documents() == []
        _add(idx, "new.md", "lambda")
        assert len(idx.search("lambda", Scope(), k=1)) == 1


def test_a_file_that_is_not_ours_is_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"chat:\n  docs: {}\n")
    with pytest.raises(StoreError, match=r"notes\.txt is not a SQLite database, so it is not a document index; move it away"):
        Index(text)
    assert text.read_bytes() == b"chat:\n  docs: {}\n"
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"other\.db is a SQLite database of another program, not a document index"):
        Index(other)
    assert _raw(other, "SELECT name FROM sqlite_schema") == [("t",)]
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "docs.sqlite"
    Index(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {index_file.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(
        StoreError, match=rf"written by a newer ernie-ops \(index schema {index_file.SCHEMA_VERSION + 1}, this one knows 1\); upgrade"
    ):
        Index(path)


def test_an_unwritable_directory_is_a_sentence(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        StoreError,
        match=r"cannot open the document index .*file/docs\.sqlite: a part of that path is a file, not a directory; "
        r"point the index at a directory",
    ):
        Index(tmp_path / "file" / "docs.sqlite")


# ---- searching -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        '"',
        '""',
        "AND",
        "OR NOT",
        "*",
        "NEAR(",
        "a:b",
        "'; DROP TABLE documents; --",
        "\x00",
        "",
        "   ",
        "🙂🙂",
        "(((",
        "x" * 5000,
        "年假 OR",
    ],
)
def test_hostile_questions_never_break_the_query(index, question):
    _add(index, "a.md", "年假 and or not near mu")
    hits = index.search(question, Scope(), k=5)
    assert isinstance(hits, list)
    assert len(index.documents()) == 1


def test_coverage_is_the_idf_weighted_share_of_the_question_found(index):
    _add(index, "a.md", "vpn 配置 步骤")
    _add(index, "b.md", "vpn 故障")
    for i in range(8):
        _add(index, f"filler{i}.md", f"其他 内容 {i} 配置" if i < 3 else f"其他 内容 {i}")
    full, part = index.search("vpn 配置", Scope(), k=2)
    assert full.file == "a.md" and full.coverage == pytest.approx(1.0)
    assert part.file == "b.md" and 0.5 < part.coverage < 1  # only 'vpn' is in it, the rarer term (2 passages vs 4)
    hits = index.search("配置 zzqqx", Scope(), k=5)  # a term in no passage weighs most: the documents lack it
    idf = lambda df: math.log((10 - df + 0.5) / (df + 0.5) + 1)  # noqa: E731  (BM25's IDF, n = 10 passages)
    assert len(hits) == 4 and {round(h.coverage, 9) for h in hits} == {round(idf(4) / (idf(4) + idf(0)), 9)}
    assert index.search("zzqqx", Scope(), k=5) == []


def test_common_terms_beyond_the_postings_budget_are_dropped_from_the_match(index, monkeypatch):
    monkeypatch.setattr(index_search, "POSTINGS_BUDGET", 2)  # as in a corpus of 100k passages, where the pruning pays
    for i in range(10):
        _add(index, f"d{i}.md", f"common words {i}")
    _add(index, "rare.md", "common rare")
    _add(index, "other.md", "rare")
    # 'rare' (2 passages) fits the budget, 'common' (11) does not: only the rare term is matched
    assert sorted(h.file for h in index.search("common rare", Scope(), k=20)) == ["other.md", "rare.md"]
    cov = {h.file: h.coverage for h in index.search("common rare", Scope(), k=20)}
    assert cov["rare.md"] == pytest.approx(1.0) and 0.5 < cov["other.md"] < 1  # coverage still counts the dropped term
    assert len(index.search("common", Scope(), k=20)) == 11  # nothing rarer: the common term is searched


def test_when_even_the_rarest_term_is_over_the_budget_passages_holding_all_are_ranked(index, monkeypatch):
    monkeypatch.setattr(index_search, "POSTINGS_BUDGET", 2)
    for i in range(10):
        _add(index, f"d{i}.md", f"common words {i}")
    _add(index, "rare.md", "common rare")
    _add(index, "w.md", "words")
    _add(index, "w2.md", "words")
    assert sorted(h.file for h in index.search("common words", Scope(), k=20)) == sorted(f"d{i}.md" for i in range(10))
    assert sorted(h.file for h in index.search("words nowhere", Scope(), k=20)) == sorted(
        [*(f"d{i}.md" for i in range(10)), "w.md", "w2.md"]
    )


def test_changing_the_tokenizer_reindexes_the_stored_passages(tmp_path):
    path = tmp_path / "docs.sqlite"
    with Index(path) as idx:
        _add(idx, "a.md", "公司年假制度")
        assert len(idx.search("年假", Scope(), k=5)) == 1
    with Index(path, tokenizer="whitespace") as idx:
        assert idx.stats().tokenizer == "whitespace"
        assert idx.search("年假", Scope(), k=5) == []  # whitespace tokens: the whole run is one token
        assert len(idx.search("公司年假制度", Scope(), k=5)) == 1
    with pytest.raises(StoreError, match="unknown tokenizer 'nope'"):
        Index(path, tokenizer="nope")


def test_a_passage_is_found_by_its_heading_path_but_shows_and_covers_only_its_own_text(index):
    heading = ("VPN 配置指南（Windows）", "概述")
    text = "网关地址为 vpn.example.com，登录使用 SSO 账号。"
    index.add("vpn.md", "s", 1, "markdown", [Chunk(text, 0, 40, 40 + len(text), heading=heading)])
    _add(index, "other.md", "报销需要在 60 天内提交。")
    (hit,) = index.search("配置指南", Scope(), k=5)  # words only in the heading path
    assert (hit.file, hit.text, hit.heading, hit.start, hit.end) == ("vpn.md", text, heading, 40, 40 + len(text))
    assert hit.coverage == 0.0  # the passage itself does not hold them: the relevance gate is not fooled
    (hit,) = index.search("SSO 账号", Scope(), k=5)
    assert hit.coverage == pytest.approx(1.0)
    # the heading's tokens are counted in the passage's terms (and taken away with it)
    assert _raw(index.path, "SELECT df FROM terms WHERE term = '指南'") == [(1,)]
    index.remove(hit.doc_id)
    assert _raw(index.path, "SELECT df FROM terms WHERE term = '指南'") == []


def test_an_index_from_before_heading_paths_were_indexed_is_reindexed_on_open(tmp_path, monkeypatch):
    path = tmp_path / "docs.sqlite"
    monkeypatch.setattr(terms, "INDEX_HEADINGS", False)  # stands for the older code: the passage text alone
    with Index(path) as idx:
        idx.add("vpn.md", "s", 1, "markdown", [Chunk("网关地址为 vpn.example.com。", 0, 0, 22, heading=("配置指南",))])
        assert idx.search("配置指南", Scope(), k=5) == []
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta WHERE key = 'token_source'")  # an index written before the key existed
    conn.commit()
    conn.close()
    monkeypatch.setattr(terms, "INDEX_HEADINGS", True)
    with Index(path) as idx:
        (hit,) = idx.search("配置指南", Scope(), k=5)
        assert hit.text == "网关地址为 vpn.example.com。"
    assert _raw(path, "SELECT value FROM meta WHERE key = 'token_source'") == [(terms.TOKEN_SOURCE,)]


# ---- dense ---------------------------------------------------------------------------------------


def test_dense_search_is_scoped_inside_the_knn_query(index):
    index.add("shared.md", "s", 1, "text", _chunks("shared"), vectors=[[0.0, 1.0, 0.0]])
    for i in range(20):  # bob's vectors are all nearer the question than alice's
        index.add(f"bob{i}.md", "s", 1, "text", _chunks("bob"), owner="bob", conversation="c", vectors=[[1.0, 0.01 * i, 0.0]])
    index.add("alice.md", "s", 1, "text", _chunks("alice"), owner="alice", conversation="c", vectors=[[0.5, 0.5, 0.0]])
    index.add("alice2.md", "s", 1, "text", _chunks("alice other chat"), owner="alice", conversation="d", vectors=[[1.0, 0.0, 0.0]])
    hits = index.search_dense([1.0, 0.0, 0.0], Scope(None, "alice", "c"), k=2)
    assert [h.file for h in hits] == ["alice.md", "shared.md"]
    assert hits[0].score == pytest.approx(1 - (1 - 0.5 / (0.5**2 * 2) ** 0.5), abs=1e-5)
    assert hits[0].ranks == {"dense": 1} and hits[1].ranks == {"dense": 2}
    assert [h.file for h in index.search_dense([1.0, 0.0, 0.0], Scope([]), k=5)] == []
    assert index.stats().dimension == 3
    with pytest.raises(StoreError, match="the question's vector has 2 dimensions but the index holds 3-dimensional vectors"):
        index.search_dense([1.0, 0.0], Scope(), k=2)


def test_dense_search_on_an_index_without_vectors_is_empty(index):
    _add(index, "a.md", "nu")
    assert index.search_dense([1.0, 0.0], Scope(), k=3) == []


def test_passages_indexed_without_vectors_get_them_later_in_their_own_scope(index):
    shared = index.add("shared.md", "s", 1, "text", _chunks("omicron one", "omicron two"), collection="kb")
    mine = index.add("mine.md", "s", 1, "text", _chunks("omicron mine"), owner="alice", conversation="c")
    assert [t for _, t in index.missing_vectors(shared)] == ["omicron one", "omicron two"]  # no vectors at all yet
    (first, _), (second, _) = index.missing_vectors(shared)
    assert index.add_vectors(shared, [(first, [1.0, 0.0, 0.0])]) == 1  # part of a document: the rest stays missing
    assert index.missing_vectors(shared) == [(second, "omicron two")] and index.stats().dimension == 3
    assert index.add_vectors(shared, [(first, [0.0, 1.0, 0.0]), (second, [0.0, 1.0, 0.0])]) == 1  # one that has a vector is kept
    ((cid, _),) = index.missing_vectors(mine)
    assert index.add_vectors(mine, [(cid, [0.0, 0.0, 1.0])]) == 1
    assert index.missing_vectors(shared) == [] and index.missing_vectors(mine) == []
    assert [h.file for h in index.search_dense([0.0, 0.0, 1.0], Scope(["kb"]), k=5)] == ["shared.md", "shared.md"]  # not alice's
    assert [h.file for h in index.search_dense([0.0, 0.0, 1.0], Scope(["kb"], "alice", "c"), k=1)] == ["mine.md"]
    assert [h.text for h in index.search_dense([1.0, 0.0, 0.0], Scope(["kb"]), k=1)] == ["omicron one"]


def test_a_back_fill_for_a_document_replaced_meanwhile_stores_nothing(index):
    doc = index.add("a.md", "s1", 1, "text", _chunks("pi old"))
    stale = index.missing_vectors(doc)
    index.add("a.md", "s2", 1, "text", _chunks("pi new"))  # replaced while the old passages were being embedded
    assert index.add_vectors(doc, [(cid, [1.0, 0.0]) for cid, _ in stale]) == 0
    assert index.stats().dimension is None


def test_without_sqlite_vec_only_the_vector_paths_fail(index, monkeypatch):
    """sqlite_vec made unimportable (a stub: this Python can load it, so the fault is injected)."""
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)
    with pytest.raises(StoreError, match="dense vectors need the sqlite-vec extension, which this Python cannot load"):
        index.add("v.md", "s", 1, "text", _chunks("xi"), vectors=[[1.0]])
    _add(index, "a.md", "xi")
    assert [h.file for h in index.search("xi", Scope(), k=3)] == ["a.md"]


def test_damage_found_in_use_is_a_sentence_and_the_next_open_keeps_the_file_aside(tmp_path, monkeypatch):
    checks = []
    real_check = sqlite_file.damage
    monkeypatch.setattr(sqlite_file, "damage", lambda conn: checks.append(1) or real_check(conn))  # a spy: counts the real checks
    path = tmp_path / "docs.sqlite"
    _build(path)
    checks.clear()
    Index(path).close()
    Index(path).close()
    assert len(checks) == 1  # an unchanged file is quick_check'ed once per process, not at every open
    idx = Index(path)
    data = bytearray(path.read_bytes())
    for off in range(4096 * 2, len(data), 4096):  # damage every page from page 3 while the index is open
        data[off : off + 4096] = b"\xa5" * 4096
    with open(path, "r+b") as f:
        f.write(bytes(data))
    with pytest.raises(
        StoreError, match=r"docs\.sqlite is damaged \(.*\); the next time it is opened it is kept aside as docs\.sqlite\.corrupt-"
    ):
        idx.search("kappa", Scope(), k=5)
    idx.close()
    with Index(path) as idx:
        assert len(checks) == 2 and len(idx.warnings) == 1 and len(list(tmp_path.glob("docs.sqlite.corrupt-*"))) == 1
        assert idx.documents() == []
