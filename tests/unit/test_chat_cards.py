"""What the chat's custom elements are given (ernie_ops/chat/cards.py): the form, a post's card, a batch report."""

from __future__ import annotations

import dataclasses
import json

from ernie_ops import config
from ernie_ops.chat import cards
from ernie_ops.marketing import rules
from ernie_ops.marketing.batch import BatchSummary, FailedRow
from ernie_ops.marketing.batch_io import Read, RowProblem
from ernie_ops.marketing.generate import CopyRequest, Post

CFG = config.parse("chat:\n  marketing: {posts: 4, max_chars: 30}\n").chat.marketing


def test_form_keeps_what_the_user_typed_and_puts_each_error_under_its_field():
    fresh = cards.form_props(CFG)
    assert fresh == {"values": {"product": "", "selling_points": "", "audience": "", "tone": "", "channel": "moments", "posts": 4,
                                "max_chars": 30},
                     "errors": {}, "failure": None,
                     "channels": [{"name": "moments", "label": "朋友圈 WeChat Moments", "max_chars": 30},
                                  {"name": "weibo", "label": "微博 Weibo", "max_chars": 30},
                                  {"name": "xiaohongshu", "label": "小红书 Xiaohongshu", "max_chars": 30}]}  # fmt: skip
    again = cards.form_props(CFG, {"product": "耳机", "posts": "x", "max_chars": "", "evil": "<b>"}, {"posts": "整数 / whole number"})
    assert again["values"]["product"] == "耳机" and again["values"]["posts"] == "x"  # shown back as typed, to be fixed
    assert again["values"]["max_chars"] == 30 and "evil" not in again["values"]  # an emptied field gets the default back
    assert again["errors"] == {"posts": "整数 / whole number"}
    assert cards.form_props(CFG, failure="模型服务暂时无法连接")["failure"] == "模型服务暂时无法连接"


def test_a_card_shows_the_whole_text_its_count_and_what_it_breaks():
    r = rules.Rules(max_chars=10)
    text = "最佳降噪耳机，通勤路上安静一整天"
    post = Post(text, rules.count_chars(text), rules.check(text, r), attempts=3)
    props = cards.post_props(post, "c1", 2, 10)
    assert props["text"] == text and props["chars"] == 16 and props["max_chars"] == 10  # never cut
    assert props["flags"] == ["超长 16/10 字 / too long", "绝对化用语「最佳」/ forbidden word"]
    assert props["index"] == 2 and props["card"] == "c1" and props["attempts"] == 3
    ok = cards.post_props(Post("安静通勤", 4), "c2", 1, 10)
    assert ok["flags"] == []
    broken = cards.post_props(Post('{"posts": ["半截', 12, unusable="not JSON"), "c3", 3, 10)
    assert broken["flags"] == ["模型输出无法解析 / unusable output"]


def test_batch_report_counts_and_lists_skipped_rows_by_number():
    problems = [RowProblem(n, "产品为空 / product is empty") for n in range(2, 2 + cards.SHOWN_ROW_PROBLEMS + 3)]
    read = Read(rows=[], problems=problems, encoding="utf-8", format="csv")
    summary = BatchSummary(output="o.csv", generated=7, posts=21, posts_flagged=2,
                           failed_rows=[FailedRow(30, "台灯", "模型服务暂时无法连接")])  # fmt: skip
    text = cards.batch_report("清单.csv", read, summary)
    assert text.startswith("**清单.csv**：7 行已生成，23 行格式有误已跳过，1 行生成失败；共 21 条文案，2 条标记未通过规则。")
    assert "- 第 2 行 / row 2: 产品为空" in text and f"- 第 {1 + cards.SHOWN_ROW_PROBLEMS} 行" in text
    assert f"第 {2 + cards.SHOWN_ROW_PROBLEMS} 行" not in text and "另有 3 行" in text
    assert "模型服务出错的行没有文案" in text
    clean = cards.batch_report("a.xlsx", Read(rows=[], problems=[], encoding=None, format="xlsx"), BatchSummary(output="o", generated=2))
    assert "\n" not in clean and "2 行已生成" in clean  # nothing failed, nothing skipped: one line


def test_the_chat_app_and_the_cli_reach_the_configured_gateway_with_the_key_from_the_environment():
    import asyncio

    from ernie_ops.client.gateway import GatewayClient

    cfg = config.parse("gateway: {url: 'http://127.0.0.1:8080'}\nchat: {read_timeout_seconds: 7, extra_body: {top_p: 0.8}}\n")
    client = GatewayClient.from_config(cfg, {"ERNIE_OPS_API_KEY": "k-123"})
    try:
        assert client.base_url == "http://127.0.0.1:8080" and client.timeouts.read == 7 and client.extra_body == {"top_p": 0.8}
        assert client.http.headers["Authorization"] == "Bearer k-123"
        assert "Authorization" not in GatewayClient.from_config(cfg, {}).http.headers  # no key: no header, never from YAML
    finally:
        asyncio.run(client.aclose())


def stored_card(post: Post, card: str, index: int, request, message: str, **kw) -> dict:
    """A CopyPost element as the history store keeps it (Chainlit's ElementDict, props as last updated)."""
    return {"id": f"el-{card}", "threadId": "t1", "type": "custom", "name": "CopyPost", "display": "inline", "forId": message,
            "props": cards.post_props(post, card, index, request.max_chars, request) if request else
            cards.post_props(post, card, index, 30)} | kw  # fmt: skip


def test_a_card_keeps_the_values_of_its_request_and_they_give_the_same_request_back():
    request = CopyRequest.from_form({"product": "耳机", "selling_points": "降噪", "channel": "微博", "max_chars": "50"}, CFG)
    props = cards.post_props(Post("安静通勤", 4), "c1", 1, request.max_chars, request)
    assert props["request"] == {"product": "耳机", "selling_points": "降噪", "audience": "", "tone": "", "posts": 4,
                                "max_chars": 50, "channel": "weibo"}  # fmt: skip
    assert json.loads(json.dumps(props)) == props  # stored as JSON
    assert CopyRequest.from_form(props["request"], CFG) == request
    assert "request" not in cards.post_props(Post("安静通勤", 4), "c1", 1, 30)


def test_a_resumed_threads_cards_get_their_request_back_one_per_generation():
    values = {"product": "保温杯", "selling_points": "12 小时保温", "posts": 2}
    first, again = CopyRequest.from_form(values, CFG), CopyRequest.from_form(values, CFG)  # the same values, generated twice
    gone = dataclasses.replace(first, channel="douyin")  # a channel this ernie-ops does not have (any more)
    stored = [
        {"id": "form", "name": "CopyForm", "props": cards.form_props(CFG, values)},
        stored_card(Post("一", 1), "a1", 1, first, "m1"),
        stored_card(Post("二（重写过）", 6, attempts=2), "a2", 2, first, "m1"),
        stored_card(Post("三", 1), "b1", 1, again, "m2"),
        stored_card(Post("四", 1), "b2", 2, again, "m2"),
        stored_card(Post("旧", 1), "old", 1, None, "m0"),  # stored before cards kept their request
        stored_card(Post("抖音", 2), "d1", 1, gone, "m3"),
    ]
    found = cards.stored_cards(stored, CFG)
    assert sorted(found) == ["a1", "a2", "b1", "b2"]  # the old card and the refused request's stay stale
    a1, a2, b1, b2 = (found[c] for c in ("a1", "a2", "b1", "b2"))
    assert a1.request == first and a1.request is a2.request and b1.request is b2.request
    assert a1.request is not b1.request  # a rewrite compares a card with its own generation only
    assert (a1.index, a2.index, b2.index) == (1, 2, 2)
    assert a2.element["id"] == "el-a2" and a2.element["forId"] == "m1" and a2.element["threadId"] == "t1"
    assert a2.element["props"]["text"] == "二（重写过）" and a2.element["props"]["attempts"] == 2  # as last updated


def test_stored_cards_skip_what_is_not_a_usable_card():
    request = CopyRequest.from_form({"product": "台灯", "posts": 2}, CFG)
    good = stored_card(Post("护眼", 2), "ok", 1, request, "m1")
    broken = [
        {**good, "id": None},
        {**good, "name": "OnboardingItem"},
        {**good, "props": "not a dict"},
        stored_card(Post("x", 1), "idx3", 3, request, "m1"),  # an index past the request's posts
        {**good, "props": {**good["props"], "card": "bool", "index": True}},
        {**good, "props": {**good["props"], "card": "list", "request": ["台灯"]}},
        {**good, "props": {**good["props"], "card": "posts", "request": {**good["props"]["request"], "posts": 99}}},
    ]
    assert list(cards.stored_cards([*broken, good], CFG)) == ["ok"]
