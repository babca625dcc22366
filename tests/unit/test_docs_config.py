"""The chat.docs section: defaults, and each bad value reported with its line and what to do."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.errors import ConfigError


def problems(text: str) -> dict[str, object]:
    with pytest.raises(ConfigError) as exc:
        config.parse(text, "ernie.yaml")
    return {p.field: p for p in exc.value.problems}


def test_defaults_are_a_working_lexical_setup():
    docs = config.parse("").chat.docs
    assert docs.index_file.startswith("/var/lib/ernie-ops-chat/")  # the chat app's StateDirectory
    assert not docs.embeddings.enabled and docs.overlap_chars < docs.chunk_chars
    assert docs.tokenizer in ("bigram", "unigram+bigram", "jieba", "jieba+bigram")


def test_every_problem_at_once_with_its_line():
    found = problems(
        "chat:\n"
        "  docs:\n"
        "    tokenizer: spaces\n"  # 3
        "    top_k: 0\n"  # 4
        "    embeddings:\n"
        "      enabled: true\n"  # 6: no url / model
    )
    assert found["chat.docs.tokenizer"].line == 3 and "bigram" in found["chat.docs.tokenizer"].message
    assert found["chat.docs.top_k"].line == 4
    emb = found["chat.docs.embeddings"]
    assert "url" in emb.message and "model" in emb.message


def test_overlap_must_be_below_the_passage_size():
    found = problems("chat:\n  docs:\n    chunk_chars: 200\n    overlap_chars: 200\n")
    (p,) = found.values()
    assert "overlap_chars (200) must be smaller than chunk_chars (200)" in p.message


def test_collection_readers_and_unknown_keys():
    cfg = config.parse("chat:\n  docs:\n    collections:\n      hr: {readers: [alice]}\n").chat.docs
    assert cfg.collections["hr"].readers == ["alice"]
    found = problems("chat:\n  docs:\n    collections:\n      hr: {reader: [alice]}\n")
    assert any("reader" in f for f in found)


def test_the_docs_section_is_the_chat_apps_alone():
    """A docs change restarts the chat app only, never cuts the engine over (apply's per-service digests)."""
    from ernie_ops.operate import apply

    a, b = config.parse(""), config.parse("chat:\n  docs:\n    top_k: 6\n")
    assert apply.config_digest(a, "engine") == apply.config_digest(b, "engine")
    assert apply.config_digest(a, "chat") != apply.config_digest(b, "chat")
