"""Follow-up detection (pure) and a chat session that searches a follow-up with the question it follows (real SQLite
index, real extraction)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ernie_ops.chat.docs_session import DocsSession
from ernie_ops.docs import followup, ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.store import Index


@pytest.mark.parametrize(
    "message",
    ["那它保留多久？", "那陪产假呢？", "这个费用能报销吗？", "多久？", "And what about staging?", "Who has to approve it?", "Why?",
     "What happens if they don't?", "Mac 上呢？"],
)  # fmt: skip
def test_a_message_that_leans_on_the_previous_question_is_a_follow_up(message):
    assert followup.is_follow_up(message)
    assert followup.context(message, ["How long do we keep production logs?"]) == ["How long do we keep production logs?"]


@pytest.mark.parametrize(
    "message",
    ["年假", "病假需要什么证明", "这个月的彩色打印额度是多少页", "How do I connect to the VPN from Ubuntu?",
     "Is it OK to write customer phone numbers to the log?", "Should I shut down a computer that has a virus?",
     "Is it possible to get admin rights on my Mac?", "Where should a service keep its database password?",
     "Is there a dress code in the office?"],
)  # fmt: skip
def test_a_self_contained_question_is_searched_alone(message):
    assert not followup.is_follow_up(message)
    assert followup.context(message, ["年假有几天"]) == []


def test_the_first_question_has_no_context_and_a_chain_reaches_back_to_its_subject():
    assert followup.context("那它保留多久？", []) == []
    assert followup.context("那它保留多久？", ["  "]) == []
    chain = ["员工停车费每月多少钱", "年假有几天", "那它能顺延吗？", "那要谁审批？"]
    assert followup.context("那过期了呢？", chain) == ["年假有几天", "那它能顺延吗？", "那要谁审批？"]


def test_a_chat_session_searches_a_follow_up_with_the_question_before_it(tmp_path: Path):
    c = DocsConfig.model_validate({"index_file": str(tmp_path / "docs" / "index.sqlite")})
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "logs.txt").write_text("生产环境日志在 Loki 中保留 30 天，冷存储保留 180 天。", encoding="utf-8")
    (kb / "mail.txt").write_text("邮箱容量 50 GB，已删除的邮件保留 30 天后彻底清除。", encoding="utf-8")
    (kb / "badge.txt").write_text("访客登记后可以领取临时访客卡，离开时交回前台。", encoding="utf-8")
    with Index(c.index_file, tokenizer=c.tokenizer) as index:
        assert not ingest.sync_dir(index, kb, c, "kb").failed
    alone = asyncio.run(DocsSession(c, "alice", "t0").retrieve("那它保留多久？"))
    assert alone.context == [] and not alone.answerable  # alone it names no subject: "the documents do not answer this"
    session = DocsSession(c, "alice", "t1")
    first = asyncio.run(session.retrieve("生产环境的日志存在哪里？"))
    assert first.hits[0].file == "logs.txt" and first.context == []
    follow = asyncio.run(session.retrieve("那它保留多久？"))
    assert follow.context == ["生产环境的日志存在哪里？"]
    assert follow.hits[0].file == "logs.txt", [h.file for h in follow.hits]
    switch = asyncio.run(session.retrieve("访客怎么领取临时卡"))  # a new subject: searched alone
    assert switch.context == [] and switch.hits[0].file == "badge.txt"
