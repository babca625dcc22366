"""A chat session's document scope: collections by reader lists, the user's pick in the chat settings
(narrows, never widens), uploads private to (user, conversation). Real SQLite index, real extraction."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ernie_ops.chat.docs_session import DocsSession, Upload, forget_all_uploads, upload_summary
from ernie_ops.docs import ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.retrieve import allowed_collections
from ernie_ops.docs.store import Index
from ernie_ops.errors import ErnieOpsError
from tests.harness import doc_fixtures


def cfg(tmp_path: Path, **values) -> DocsConfig:
    return DocsConfig.model_validate({"index_file": str(tmp_path / "docs" / "index.sqlite"), **values})


def seed(c: DocsConfig, tmp_path: Path) -> None:
    for collection, text in (("hr", "年假每年五天，需提前三天申请。"), ("it", "VPN 配置：Linux 上安装 openconnect 客户端。")):
        d = tmp_path / collection
        d.mkdir()
        (d / f"{collection}.txt").write_text(text, encoding="utf-8")
        with Index(c.index_file, tokenizer=c.tokenizer) as index:
            assert not ingest.sync_dir(index, d, c, collection).failed


def test_reader_lists_decide_the_collections_a_user_may_search(tmp_path):
    c = cfg(tmp_path, collections={"hr": {"readers": ["alice"]}, "it": {"readers": ["*"]}})
    assert allowed_collections(c, "alice", ["hr", "it", "misc"]) == ["hr", "it", "misc"]  # not listed: open to all
    assert allowed_collections(c, "bob", ["hr", "it", "misc"]) == ["it", "misc"]


def test_the_pick_narrows_and_never_widens(tmp_path):
    c = cfg(tmp_path, collections={"hr": {"readers": ["alice"]}})
    seed(c, tmp_path)
    bob = DocsSession(c, "bob", "b1")
    assert asyncio.run(bob.collections()) == ["it"]
    assert not asyncio.run(bob.retrieve("年假提前申请")).answerable  # hr is alice's only
    bob.pick(["hr", "it"])  # a forged settings update cannot add hr
    assert all(h.collection != "hr" for h in asyncio.run(bob.retrieve("年假提前申请")).hits)
    alice = DocsSession(c, "alice", "a1")
    assert asyncio.run(alice.retrieve("年假提前申请")).hits[0].collection == "hr"
    alice.pick(["it"])
    assert not asyncio.run(alice.retrieve("年假提前申请")).answerable
    assert asyncio.run(alice.retrieve("Linux 上的 VPN 客户端是什么？")).answerable


def test_uploads_of_a_previous_run_are_removed_at_start_and_summaries_name_each_file(tmp_path):
    c = cfg(tmp_path)
    seed(c, tmp_path)
    f = tmp_path / "note.md"
    f.write_text("# 备份\n\n数据库每天凌晨两点备份。\n", encoding="utf-8")
    s = DocsSession(c, "alice", "a1")
    outcomes = asyncio.run(s.upload([Upload(str(f), "note.md", f.stat().st_size), Upload(None, "lost.pdf")]))
    line, refused = upload_summary(outcomes)
    assert line == "已索引 / Indexed: note.md (1 段 passages)" and refused == ["lost.pdf: arrived without content; upload it again"]
    assert asyncio.run(s.retrieve("数据库凌晨备份")).hits[0].file == "note.md"
    assert forget_all_uploads(c) == 1
    assert all(h.file != "note.md" for h in asyncio.run(s.retrieve("数据库凌晨备份")).hits)
    assert asyncio.run(DocsSession(c, "bob", "b").retrieve("年假提前申请")).answerable  # shared ones stay


def test_an_unusable_index_location_is_a_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    c = DocsConfig.model_validate({"index_file": str(blocker / "sub" / "index.sqlite")})
    with pytest.raises(ErnieOpsError, match=r"chat\.docs\.index_file"):
        asyncio.run(DocsSession(c, "alice", "a1").retrieve("x"))


def test_a_crash_inside_extraction_is_a_sentence_and_the_index_keeps_serving(tmp_path, monkeypatch):
    """A stub to inject a fault the real libraries cannot produce on demand: the extraction child kills itself
    with SIGSEGV (ERNIE_OPS_DOCS_FAULT, read by the child only). The session, its process and the index live on."""
    c = cfg(tmp_path)
    seed(c, tmp_path)
    f = tmp_path / "crash.md"
    f.write_text("# x\n\n年假每年五天。\n", encoding="utf-8")
    s = DocsSession(c, "alice", "a1")
    monkeypatch.setenv("ERNIE_OPS_DOCS_FAULT", "segv")
    (crashed,) = asyncio.run(s.upload([Upload(str(f), "crash.md", f.stat().st_size)]))
    assert crashed.action == "failed" and crashed.reason == "crashed" and "crash.md" in crashed.error, crashed
    monkeypatch.delenv("ERNIE_OPS_DOCS_FAULT")
    assert asyncio.run(s.retrieve("Linux 上的 VPN 客户端是什么？")).answerable  # the index is intact
    (again,) = asyncio.run(s.upload([Upload(str(f), "crash.md", f.stat().st_size)]))
    assert again.action == "added"


def test_an_uploaded_pdf_with_scanned_pages_is_indexed_and_the_summary_names_those_pages(tmp_path):
    c = cfg(tmp_path)
    f = tmp_path / "backup.pdf"
    f.write_bytes(doc_fixtures.partly_scanned_pdf(pages=6, scanned=(2, 4, 5)))
    s = DocsSession(c, "alice", "a1")
    outcomes = asyncio.run(s.upload([Upload(str(f), "backup.pdf", f.stat().st_size)]))
    line, refused = upload_summary(outcomes)
    assert refused == []
    assert line == (
        "已索引 / Indexed: backup.pdf (6 页 pages, 3 段 passages; 3 页没有文字层（第 2、4、5 页）：扫描件？请先做 OCR / "
        "3 pages without a text layer (pages 2, 4, 5): scanned? run OCR first)"
    )
    assert [h.page for h in asyncio.run(s.retrieve("nightly backup")).ranked] == [1, 3, 6]  # the text pages are indexed
