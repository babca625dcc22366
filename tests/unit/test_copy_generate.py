"""marketing/generate.py without a server: the form's validation, the prompt, the schema, and the regeneration loop.

The regeneration tests use an INJECTED `complete` function in place of the gateway client's: it returns the
answers a test scripts (a post too long, one with a forbidden word, unparseable JSON, a gateway error) on demand,
which a real model does not do reliably. The real gateway path is tests/integration/test_copy_gateway.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from ernie_ops.client.gateway import ChatError
from ernie_ops.marketing import generate
from ernie_ops.marketing.batch_io import Product
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import (
    ANGLES,
    CopyRequest,
    CopyWriter,
    FormError,
    Post,
    build_messages,
    posts_schema,
    response_format,
    salvage,
)
from ernie_ops.marketing.rules import Rules, check

CFG = MarketingConfig()


def answer(text: str) -> str:
    return json.dumps({"posts": [text]}, ensure_ascii=False)


class Scripted:
    """The injected `complete`: pops scripted answers (str or an exception) and records every call."""

    def __init__(self, *answers, default: str | Callable[[list[dict]], str] | None = None):
        self.answers = list(answers)
        self.default = default
        self.calls: list[dict] = []
        self.active = 0
        self.peak = 0

    async def __call__(self, messages, max_tokens, temperature, stats=None, extra=None):
        self.calls.append({"messages": messages, "max_tokens": max_tokens, "temperature": temperature, "extra": extra})
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0.01)
            item = self.answers.pop(0) if self.answers else self.default
            if callable(item):
                item = item(messages)
            if isinstance(item, BaseException):
                raise item
            assert item is not None, "the script ran out of answers"
            return item
        finally:
            self.active -= 1


def by_angle(messages) -> str:
    """A post from the angle the prompt asks for: the posts of one request differ, as a model's do."""
    return answer("好杯，" + next(zh for zh, _ in ANGLES if zh in messages[1]["content"]))


def writer(script: Scripted, **cfg) -> CopyWriter:
    return CopyWriter(None, MarketingConfig(**cfg), "SYSTEM", complete=script)


REQ = CopyRequest("保温杯", "316不锈钢，保温12小时", "上班族", "温暖", posts=3, max_chars=20)


# --- the form ------------------------------------------------------------------------------------------------


def test_form_strings_from_a_browser_are_trimmed_and_converted():
    req = CopyRequest.from_form(
        {"product": "  保温杯 ", "selling_points": " 轻 ", "audience": "学生", "tone": "", "posts": "5", "max_chars": " 80 "}, CFG
    )
    assert req == CopyRequest("保温杯", "轻", "学生", "", 5, 80, "moments")  # the form's channel left at its default


def test_form_empty_numbers_take_the_config_defaults():
    req = CopyRequest.from_form({"product": "杯", "posts": "", "max_chars": None}, MarketingConfig(posts=4, max_chars=30))
    assert (req.posts, req.max_chars) == (4, 30)


def test_form_reports_every_bad_field_at_once():
    with pytest.raises(FormError) as info:
        CopyRequest.from_form({"product": "   ", "posts": "0", "max_chars": "abc"}, CFG)
    problems = info.value.problems
    assert set(problems) == {"product", "posts", "max_chars"}
    assert "产品" in problems["product"] and "product" in problems["product"]
    assert "1" in problems["posts"] and "10" in problems["posts"] and "'0'" in problems["posts"]
    assert "'abc'" in problems["max_chars"] and "2000" in problems["max_chars"]
    text = str(info.value)
    assert "\n" not in text and "The form has 3 field(s) to fix (product, number of posts, max length)" in text
    assert text.count(". ") == 0 and text.endswith("see the note under each.")  # one sentence (each language)


@pytest.mark.parametrize(
    ("field", "value"),
    [("posts", "11"), ("posts", "2.5"), ("posts", True), ("posts", "３"), ("max_chars", "4"), ("max_chars", "2001"), ("max_chars", -60)],
)
def test_form_numbers_out_of_range_or_not_whole(field, value):
    with pytest.raises(FormError) as info:
        CopyRequest.from_form({"product": "杯", field: value}, CFG)
    assert list(info.value.problems) == [field]


def test_form_accepts_the_edges_and_typed_numbers():
    req = CopyRequest.from_form({"product": "杯", "posts": 10, "max_chars": 5.0}, CFG)
    assert (req.posts, req.max_chars) == (10, 5)
    assert CopyRequest.from_form({"product": "杯", "posts": "1", "max_chars": "2000"}, CFG).max_chars == 2000


def test_form_refuses_a_field_too_long_for_the_prompt():
    with pytest.raises(FormError) as info:
        CopyRequest.from_form({"product": "杯", "selling_points": "好" * 1001}, CFG)
    assert list(info.value.problems) == ["selling_points"]


def test_from_product_takes_the_row_values_or_the_defaults():
    cfg = MarketingConfig(posts=2, max_chars=40)
    assert CopyRequest.from_product(Product(2, "杯", "轻", "学生"), cfg) == CopyRequest("杯", "轻", "学生", "", 2, 40, "moments")
    row = Product(3, "杯", "轻", "学生", "酷", 5, 90, "weibo")
    assert CopyRequest.from_product(row, cfg) == CopyRequest("杯", "轻", "学生", "酷", 5, 90, "weibo")


# --- schema and messages --------------------------------------------------------------------------------------


def test_schema_asks_for_n_posts_and_has_no_max_length():
    schema = posts_schema(1)
    assert schema["properties"]["posts"]["minItems"] == schema["properties"]["posts"]["maxItems"] == 1
    assert "maxLength" not in json.dumps(schema)  # a grammar-enforced length would cut a post mid-word
    rf = response_format(1)
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == schema and rf["json_schema"]["name"]


def test_messages_carry_the_facts_limit_forbidden_words_and_a_distinct_angle():
    rules = Rules(max_chars=20, forbidden_words=("最佳", "第一"))
    first = build_messages("SYS", REQ, 1, rules)
    second = build_messages("SYS", REQ, 2, rules)
    assert first[0] == {"role": "system", "content": "SYS"}
    user = first[1]["content"]
    for fact in ("保温杯", "316不锈钢，保温12小时", "上班族", "温暖", "20", "最佳、第一", "JSON", "posts"):
        assert fact in user
    assert ANGLES[0][0] in user and ANGLES[1][0] in second[1]["content"] and ANGLES[1][0] not in user
    assert len(first) == 2


def test_the_answer_format_is_described_with_no_example_post_to_copy():
    """A small model copied the literal example post ({"posts": ["文案 / the post"]}) as its answer; no try's
    message shows a JSON post any more, the first or a regeneration's."""
    rules = Rules(max_chars=20)
    retry = build_messages("SYS", REQ, 1, rules, Post("太长太长太长太长太长太长太长", 14))
    for message in (build_messages("SYS", REQ, 1, rules)[1], retry[-1]):
        assert '["' not in message["content"] and 'the post"' not in message["content"], message["content"]
        assert "JSON" in message["content"]


def test_angles_cycle_for_more_posts_than_angles():
    assert generate.angle(len(ANGLES) + 1) == ANGLES[0]


def test_a_regeneration_says_what_was_wrong():
    rules = Rules(max_chars=10, forbidden_words=("最佳",))
    text = "这是全网最佳的保温杯，喝热水不烫嘴"
    previous = Post(text, 17, check(text, rules), 1)
    messages = build_messages("SYS", REQ, 1, rules, previous, answer(text))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert text in messages[2]["content"]
    assert "17" in messages[3]["content"] and "10" in messages[3]["content"] and "最佳" in messages[3]["content"]
    unusable = Post("{oops", 5, [], 1, unusable="not JSON")
    again = build_messages("SYS", REQ, 1, rules, unusable, "{oops")
    assert again[2]["content"] == "{oops" and "JSON" in again[3]["content"]


def test_salvage_keeps_an_unfinished_post_whole():
    assert salvage('{"posts": ["保温杯，早八人的续命神器') == "保温杯，早八人的续命神器"
    assert salvage('{"posts": ["a\\"b\\u12') == 'a"b'
    assert salvage('{"posts": ["done"], "junk') == "done"
    assert salvage("  not json at all ") == "not json at all"


# --- the regeneration loop (injected complete) ----------------------------------------------------------------


def run(coro):
    return asyncio.run(coro)


def test_a_good_post_takes_one_request_with_the_schema():
    script = Scripted(answer("保温杯，陪你暖一整天"))
    w = writer(script, temperature=0.5, max_tokens=77)
    post = run(w.post(REQ, 1))
    assert post.text == "保温杯，陪你暖一整天" and post.chars == 10 and post.ok and post.first_try_ok and post.flags == []
    assert len(script.calls) == 1 and script.calls[0]["max_tokens"] == 77 and script.calls[0]["temperature"] == 0.5
    assert script.calls[0]["extra"] == {"response_format": response_format(1)}
    assert (w.stats.requests, w.stats.regenerations) == (1, 0)


def test_structured_output_off_sends_no_response_format():
    script = Scripted(answer("暖"))
    run(writer(script, structured_output=False).post(REQ, 1))
    assert script.calls[0]["extra"] is None


def test_a_too_long_post_is_regenerated_until_it_fits():
    # injected: the first answer is too long on purpose, the second fits
    script = Scripted(answer("这是一条故意写得很长很长的保温杯文案，远远超过了二十个字的上限"), answer("保温杯，暖一整天"))
    w = writer(script, max_attempts=3)
    post = run(w.post(REQ, 2))
    assert post.text == "保温杯，暖一整天" and post.ok and post.attempts == 2 and not post.first_try_ok
    assert (w.stats.requests, w.stats.regenerations) == (2, 1)
    retry = script.calls[1]["messages"]
    assert retry[-1]["role"] == "user" and "上限 20" in retry[-1]["content"]
    assert ANGLES[1][0] in retry[1]["content"]  # the same angle as the first try of post 2


def test_a_post_failing_every_try_is_returned_flagged_and_never_cut():
    long_text = "这是一条故意写得很长很长的保温杯文案，远远超过了二十个字的上限"
    script = Scripted(answer(long_text + "！"), answer("全网最佳保温杯"), answer(long_text))
    w = writer(script, max_attempts=3)
    post = run(w.post(REQ, 1))
    # of three failures, the one with the fewest problems is kept (one each here: the later wins)
    assert post.text == long_text and post.attempts == 3 and not post.ok
    assert post.flags == [f"too_long:{len(long_text)}/20"]
    assert (w.stats.requests, w.stats.regenerations) == (3, 2)


def test_a_forbidden_word_is_regenerated():
    script = Scripted(answer("全网最佳保温杯"), answer("好用的保温杯"))
    post = run(writer(script).post(REQ, 1))
    assert post.text == "好用的保温杯" and post.attempts == 2 and post.ok
    assert "最佳" in script.calls[1]["messages"][-1]["content"]


def test_an_unparseable_answer_is_retried_then_flagged_with_the_raw_text():
    script = Scripted('{"posts": ["保温杯，早八人的续命', "not json", '{"posts": []}')
    post = run(writer(script, max_attempts=3).post(REQ, 1))
    assert post.unusable and post.flags[0] == "unusable" and not post.ok
    assert post.text == "保温杯，早八人的续命"  # the unfinished post, whole (a post's content beats a raw answer)
    assert post.attempts == 3


def test_a_parsed_flagged_post_beats_an_unparsed_one():
    script = Scripted(answer("全网最佳保温杯"), "not json")
    post = run(writer(script, max_attempts=2).post(REQ, 1))
    assert post.text == "全网最佳保温杯" and post.flags == ["forbidden:最佳@3"] and post.unusable is None


def test_a_gateway_error_propagates_without_retry():
    script = Scripted(ChatError("down", "connect refused"))
    w = writer(script, max_attempts=3)
    with pytest.raises(ChatError) as info:
        run(w.post(REQ, 1))
    assert info.value.kind == "down" and len(script.calls) == 1


def test_a_correction_past_the_context_is_made_as_a_fresh_try():
    """The second try shows the first answer back; the gateway refuses it as too long for the model's context
    (HTTP 400, what vLLM said in a browser test with the random model's garbled answer): that try is sent again
    without the previous answer, and the post comes back instead of the whole request failing."""
    too_long = ChatError("too_long", "HTTP 400: This model's maximum context length is 2048 tokens")
    script = Scripted(answer("全网最佳保温杯"), too_long, answer("好用的保温杯"))
    w = writer(script, max_attempts=3)
    post = run(w.post(REQ, 1))
    assert post.text == "好用的保温杯" and post.ok and post.attempts == 2
    refused, fresh = script.calls[1]["messages"], script.calls[2]["messages"]
    assert [m["role"] for m in refused] == ["system", "user", "assistant", "user"]
    assert [m["role"] for m in fresh] == ["system", "user"] and fresh[1] == refused[1]
    # the first try's own too_long is not a correction: it propagates as before
    with pytest.raises(ChatError):
        run(writer(Scripted(too_long)).post(REQ, 1))


def test_posts_are_requested_concurrently_and_in_order():
    script = Scripted(default=by_angle)
    posts = run(writer(script).posts(REQ))
    assert len(posts) == 3 and script.peak == 3
    angles_sent = [next(i for i, a in enumerate(ANGLES) if a[0] in c["messages"][1]["content"]) for c in script.calls]
    assert sorted(angles_sent) == [0, 1, 2]


def test_posts_stop_the_others_when_one_fails():
    script = Scripted(ChatError("down", "gone"), default=answer("好杯"))
    with pytest.raises(ChatError):
        run(writer(script).posts(REQ))


def test_max_in_flight_bounds_the_requests():
    script = Scripted(default=by_angle)
    w = CopyWriter(None, MarketingConfig(), "S", complete=script, max_in_flight=2)
    run(w.posts(CopyRequest("杯", "", "", posts=6)))
    assert script.peak == 2 and len(script.calls) == 6


def test_a_raw_control_character_inside_the_post_still_parses():
    # xgrammar's JSON grammar lets a raw tab or newline into a string (strict JSON does not); the post is usable
    script = Scripted('{"posts": ["保温杯\t暖"]}')
    post = run(writer(script).post(REQ, 1))
    assert post.text == "保温杯\t暖" and post.ok and post.unusable is None


def test_a_writer_bounds_its_requests_by_default_below_the_connection_pool():
    # 8 rows x 20 posts (batch_io allows 20 a row) would be 160 requests: over httpx's pool of 100 connections
    script = Scripted(default=answer("好杯"))
    w = CopyWriter(None, MarketingConfig(), "S", complete=script)
    run(w.posts(CopyRequest("杯", "", "", posts=generate.DEFAULT_MAX_IN_FLIGHT + 10)))
    assert script.peak == generate.DEFAULT_MAX_IN_FLIGHT < 100


# --- near-duplicates in one set (injected complete: it returns a duplicate on demand) ---------------------------

FIRST = "保温杯，陪你暖一整天，早八通勤不再手冷"
OTHER = "冬天的办公室，一口热水就是底气"


class Repeats:
    """The injected `complete`: post 1 is FIRST; post 2 repeats it (reworded or not) for its first `repeats`
    tries, then writes OTHER; any other post comes from its angle. A real model repeats itself only by chance."""

    def __init__(self, repeats: int, duplicate: str = FIRST):
        self.repeats, self.duplicate = repeats, duplicate
        self.calls: list[list[dict]] = []

    async def __call__(self, messages, max_tokens, temperature, stats=None, extra=None):
        self.calls.append(messages)
        await asyncio.sleep(0)
        prompt = messages[1]["content"]
        if ANGLES[0][0] in prompt:
            return answer(FIRST)
        if ANGLES[1][0] in prompt:
            tries = sum(ANGLES[1][0] in m[1]["content"] for m in self.calls)
            return answer(self.duplicate if tries <= self.repeats else OTHER)
        return by_angle(messages)


def test_a_near_duplicate_in_the_set_is_regenerated():
    stand_in = Repeats(repeats=1, duplicate="早八通勤不再手冷，保温杯陪你暖一整天")  # the same clauses reordered
    w = CopyWriter(None, MarketingConfig(max_attempts=3), "S", complete=stand_in)
    posts = run(w.posts(CopyRequest("保温杯", "保温12小时", "上班族", posts=3, max_chars=60)))
    assert [p.text for p in posts[:2]] == [FIRST, OTHER] and all(p.ok for p in posts)
    assert posts[1].attempts == 2 and posts[0].attempts == posts[2].attempts == 1
    assert (w.stats.requests, w.stats.regenerations) == (4, 1)
    retry = stand_in.calls[-1]
    assert retry[2] == {"role": "assistant", "content": answer("早八通勤不再手冷，保温杯陪你暖一整天")}
    assert "和第 1 条太像" in retry[3]["content"] and "post 1" in retry[3]["content"]


def test_a_post_still_a_duplicate_after_its_tries_is_flagged_not_kept_silently():
    stand_in = Repeats(repeats=10)
    w = CopyWriter(None, MarketingConfig(max_attempts=3), "S", complete=stand_in)
    posts = run(w.posts(CopyRequest("保温杯", "", "", posts=2, max_chars=60)))
    assert posts[1].text == FIRST and not posts[1].ok and posts[1].attempts == 3
    assert posts[1].flags == ["duplicate_of:1~1.00"]
    assert posts[0].ok and w.stats.requests == 4  # post 1 once, post 2 three times: bounded by max_attempts


def test_a_duplicate_with_no_try_left_is_flagged_without_another_request():
    stand_in = Repeats(repeats=10)
    w = CopyWriter(None, MarketingConfig(max_attempts=1), "S", complete=stand_in)
    posts = run(w.posts(CopyRequest("保温杯", "", "", posts=2, max_chars=60)))
    assert posts[1].flags == ["duplicate_of:1~1.00"] and posts[1].attempts == 1 and len(stand_in.calls) == 2


def test_posts_that_never_parsed_are_not_compared():
    script = Scripted(default="not json")
    posts = run(writer(script, max_attempts=1).posts(REQ))
    assert [p.flags for p in posts] == [["unusable"]] * 3  # the same raw text thrice: flagged unusable, not duplicate


def test_a_regenerated_card_is_compared_with_the_other_cards():
    # post 2 of the request regenerated alone (a card's button), its siblings' texts given by index
    stand_in = Repeats(repeats=1, duplicate=OTHER + "！")
    w = CopyWriter(None, MarketingConfig(max_attempts=3), "S", complete=stand_in)
    post = run(w.post(CopyRequest("保温杯", "", "", posts=3, max_chars=60), 2, [FIRST, None, OTHER]))
    assert post.attempts == 3 and not post.ok and post.flags == ["duplicate_of:3~1.00"]  # OTHER is card 3's
    assert "和第 3 条太像" in stand_in.calls[1][3]["content"]
