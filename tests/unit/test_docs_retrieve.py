"""Retrieval and ingest when the optional embedding server is down: a real refused connection (a free
port on 127.0.0.1 that nothing listens on), not a stub."""

from __future__ import annotations

import logging
from pathlib import Path

from ernie_ops.docs import ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.embed import EmbeddingClient
from ernie_ops.docs.retrieve import Retriever
from ernie_ops.docs.store import Index, Scope
from tests.conftest import free_port


def setup(tmp_path: Path) -> tuple[DocsConfig, EmbeddingClient]:
    url = f"http://127.0.0.1:{free_port()}"
    c = DocsConfig.model_validate(
        {"index_file": str(tmp_path / "index.sqlite"), "embeddings": {"enabled": True, "url": url, "model": "bge", "timeout_seconds": 2}}
    )
    return c, EmbeddingClient.from_config(c.embeddings)


def test_ingest_reports_each_file_not_indexed_while_the_server_is_down(tmp_path):
    c, client = setup(tmp_path)
    d = tmp_path / "kb"
    d.mkdir()
    for i in range(2):
        (d / f"f{i}.txt").write_text(f"第{i}份文档：年假每年五天。", encoding="utf-8")
    with Index(c.index_file) as index:
        report = ingest.add_paths(index, [d], c, "kb", client.embed_sync)
        assert [o.action for o in report.outcomes] == ["failed", "failed"]  # both tried, neither stopped the other
        assert all("not indexed" in o.error and client.url in o.error for o in report.outcomes), report.outcomes
        assert index.documents() == []  # nothing half-written


def test_search_falls_back_to_the_lexical_ranking_with_a_warning(tmp_path, caplog):
    c, client = setup(tmp_path)
    d = tmp_path / "kb"
    d.mkdir()
    (d / "leave.txt").write_text("年假每年五天，需提前三天申请。", encoding="utf-8")
    with Index(c.index_file) as index:
        assert not ingest.add_paths(index, [d], c, "kb").failed  # indexed without vectors
        with caplog.at_level(logging.WARNING, logger="ernie_ops.docs"):
            found = Retriever(index, c, client.embed_sync).search("年假每年五天，要提前申请吗？", Scope())
    assert found.hits and found.hits[0].file == "leave.txt" and found.rankings == {"lexical": 1}
    assert "dense retrieval skipped" in caplog.text
