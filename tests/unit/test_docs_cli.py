"""`ernie-ops docs add|sync|list|remove|search` through the real CLI entry point, on real files and a real
SQLite index in a temporary directory (the isolated extractor runs as a real child process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ernie_ops import cli
from tests.conftest import free_port
from tests.harness import doc_fixtures

CORPUS = Path(__file__).resolve().parents[1] / "data" / "docs_corpus"
SOME = ["leave_policy.md", "holiday_calendar_2026.md", "vpn_linux.md", "vpn_windows.md", "parking.txt", "overtime.md"]


@pytest.fixture()
def env(tmp_path, monkeypatch):
    cfg = tmp_path / "ernie.yaml"
    cfg.write_text(f"chat:\n  docs:\n    index_file: {tmp_path / 'state' / 'index.sqlite'}\n    max_file_mb: 1\n")
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(cfg))
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, dict | list | str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except ValueError:
        return code, out, err


def test_add_search_list_remove_round_trip(env, capsys):
    docs = env / "kb"
    docs.mkdir()
    for name in SOME:
        shutil.copy(CORPUS / name, docs / name)
    code, res, _ = run(capsys, "docs", "add", str(docs), "--collection", "handbook", "--json")
    assert code == 0 and res["ok"] and res["changed"] and len(res["files"]) == len(SOME)
    assert {f["action"] for f in res["files"]} == {"added"}
    code, hits, _ = run(capsys, "docs", "search", "年假有多少天？", "--json")
    assert code == 0 and hits["answerable"]
    top = hits["hits"][0]
    assert top["file"] == "leave_policy.md" and "年假" in top["text"] and top["heading"] and top["score"] > 0
    assert set(top) >= {"file", "collection", "page", "heading", "score", "text"}
    code, text, _ = run(capsys, "docs", "search", "Which VPN client do I install on Linux?")
    assert code == 0 and "vpn_linux.md" in text.splitlines()[0]
    # adding the same files again re-reads nothing
    code, res, _ = run(capsys, "docs", "add", str(docs), "--collection", "handbook", "--json")
    assert code == 0 and not res["changed"] and {f["action"] for f in res["files"]} == {"unchanged"}
    code, listed, _ = run(capsys, "docs", "list", "--json")
    assert len(listed) == len(res["files"]) and all(d["collection"] == "handbook" for d in listed)
    code, res, _ = run(capsys, "docs", "remove", "leave_policy.md", "nope.md", "--collection", "handbook", "--json")
    assert code == 1 and res["removed"] == ["leave_policy.md"] and res["missing"] == ["nope.md"]
    code, hits, _ = run(capsys, "docs", "search", "年假有多少天？", "--json")
    assert all(h["file"] != "leave_policy.md" for h in hits["hits"])


def test_sync_mirrors_a_directory_and_check_changes_nothing(env, capsys):
    src = env / "kb"
    (src / "ops").mkdir(parents=True)
    (src / "ops" / "upgrade.md").write_text("# 升级\n\n升级前先备份数据库。\n", encoding="utf-8")
    (src / "leave.txt").write_text("年假每年五天。\n", encoding="utf-8")
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")
    assert code == 0 and sorted((f["name"], f["action"]) for f in res["files"]) == [("leave.txt", "added"), ("ops/upgrade.md", "added")]
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")
    assert not res["changed"]
    (src / "leave.txt").write_text("年假每年十天。\n", encoding="utf-8")
    (src / "ops" / "upgrade.md").unlink()
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--check", "--json")
    assert res["changed"] and sorted((f["name"], f["action"]) for f in res["files"]) == [
        ("leave.txt", "replaced"),
        ("ops/upgrade.md", "removed"),
    ]
    code, hits, _ = run(capsys, "docs", "search", "年假", "-c", "kb", "--json")
    assert "五天" in hits["hits"][0]["text"]  # --check wrote nothing
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")
    assert res["changed"]
    code, hits, _ = run(capsys, "docs", "search", "年假", "-c", "kb", "--json")
    assert "十天" in hits["hits"][0]["text"] and len(hits["hits"]) == 1


def test_bad_files_are_sentences_and_the_good_ones_are_indexed(env, capsys):
    files = doc_fixtures.write_all(env / "in")
    code, out, err = run(capsys, "docs", "add", *(str(p) for p in files.values()), str(env / "missing.pdf"))
    assert code == 1 and "Traceback" not in err
    errors = err.replace("\n", " ")
    for name in ("encrypted.pdf", "scanned.pdf", "truncated.pdf", "report.pdf", "empty.txt", "bomb.docx", "missing.pdf"):
        assert name in errors, name
    assert "OCR is not supported" in errors
    assert "added" in out and "zh-ttf.pdf" in out and "manual.docx" in out


def test_the_summary_names_the_pdf_pages_without_a_text_layer(env, capsys):
    src = env / "kb"
    src.mkdir()
    (src / "mixed.pdf").write_bytes(doc_fixtures.partly_scanned_pdf(pages=6, scanned=(2, 4, 5)))
    code, out, err = run(capsys, "docs", "sync", str(src), "-c", "kb")
    assert code == 0 and err == ""
    assert "added     mixed.pdf (pdf, 6 pages, 3 passages); 3 pages without a text layer (pages 2, 4, 5): scanned? run OCR first" in out
    (src / "mixed.pdf").write_bytes(doc_fixtures.partly_scanned_pdf(pages=3, scanned=(3,)))
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")
    assert code == 0 and res["files"][0]["action"] == "replaced" and res["files"][0]["empty_pages"] == [3]


def test_turning_embeddings_on_while_the_server_is_down_is_a_sentence_and_loses_nothing(env, capsys):
    """Real refused connections: a free port on 127.0.0.1 that nothing listens on."""
    src = env / "kb"
    src.mkdir()
    for name in ("leave_policy.md", "parking.txt"):
        shutil.copy(CORPUS / name, src / name)
    assert run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")[0] == 0  # embeddings off: no vectors
    code, _, err = run(capsys, "docs", "embed")
    assert code == 2 and "chat.docs.embeddings is off" in err
    cfg = env / "ernie.yaml"
    url = f"http://127.0.0.1:{free_port()}"
    cfg.write_text(cfg.read_text() + f"    embeddings: {{enabled: true, url: '{url}', model: bge, timeout_seconds: 2}}\n")
    code, res, _ = run(capsys, "docs", "sync", str(src), "-c", "kb", "--json")
    assert code == 1 and [f["action"] for f in res["files"]] == ["failed", "failed"]
    assert all("still searchable" in f["error"] and url in f["error"] and "sync again" in f["error"] for f in res["files"])
    code, _, err = run(capsys, "docs", "embed", "-c", "kb")
    assert code == 1 and "Traceback" not in err
    assert "leave_policy.md: not embedded: cannot connect to the embedding server" in err.replace("\n", " ")
    assert "1 more document(s) not tried" in err.replace("\n", " ") and "run `ernie-ops docs embed` again" in err.replace("\n", " ")
    code, listed, _ = run(capsys, "docs", "list", "--json")
    assert sorted(d["name"] for d in listed) == ["leave_policy.md", "parking.txt"]  # nothing lost
    code, hits, _ = run(capsys, "docs", "search", "停车费每月多少钱", "--json")
    assert hits["hits"][0]["file"] == "parking.txt"  # still found by its words (the dense path is skipped)


def test_usage_errors_name_what_to_do(env, capsys):
    code, _, err = run(capsys, "docs", "add", str(env), "--collection", "uploads")
    assert code == 2 and "uploads" in err and "another collection name" in err
    code, _, err = run(capsys, "docs", "add", str(env), "--collection", "a b")
    assert code == 2 and "collection name 'a b'" in err
    code, _, err = run(capsys, "docs", "remove", "--collection", "kb")
    assert code == 2 and "--all" in err
    code, _, err = run(capsys, "docs", "sync", str(env / "nope"), "-c", "kb")
    assert code == 1 and "is not a directory" in err
