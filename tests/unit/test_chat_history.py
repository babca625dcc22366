"""The history budget algorithm, with a deterministic stand-in tokenizer (1 token per character + 4 per
message). The real tokenizer through the gateway's /tokenize is tests/integration/test_chat_backend.py."""

from __future__ import annotations

import asyncio

import pytest

from ernie_ops.chat import history
from ernie_ops.chat.history import Budget, Count, TooLong, fit, turns


class CharCounter:
    def __init__(self, exact: bool = True, served: int | None = None):
        self.exact, self.served, self.calls = exact, served, 0

    async def count(self, messages: list[dict]) -> Count:
        self.calls += 1
        return Count(sum(len(m["content"]) + 4 for m in messages), self.exact, self.served)


def convo(n: int, size: int = 50) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"role": "user", "content": f"u{i:02d}" + "x" * (size - 3)})
        out.append({"role": "assistant", "content": f"a{i:02d}" + "y" * (size - 3)})
    return out


def run(coro):
    return asyncio.run(coro)


def test_everything_fits_in_one_call():
    counter = CharCounter()
    got = run(fit("sys", convo(3), {"role": "user", "content": "now"}, counter, Budget(1000, 100, 10)))
    assert counter.calls == got.calls == 1 and got.kept_turns == got.total_turns == 3
    assert [m["role"] for m in got.messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert got.tokens == 7 + 6 * 54 + 7 and got.limit == 890 and got.exact


def test_oldest_whole_turns_go_first_and_system_and_newest_stay():
    past = convo(20)  # 20 turns of 108 tokens
    newest = {"role": "user", "content": "N" * 200}
    counter = CharCounter()
    got = run(fit("S" * 100, past, newest, counter, Budget(1500, 500, 50)))  # limit 950
    assert got.messages[0] == {"role": "system", "content": "S" * 100} and got.messages[-1] == newest
    # 104 (system) + 204 (newest) + 108 per turn <= 950  ->  5 turns
    assert got.kept_turns == 5 and got.tokens == 104 + 204 + 5 * 108 <= got.limit == 950
    kept_users = [m["content"][:3] for m in got.messages if m["role"] == "user"][:-1]
    assert kept_users == ["u15", "u16", "u17", "u18", "u19"]  # the newest five, each with its reply
    assert counter.calls <= 2 + 5  # full, alone, then bisection over 20


def test_bisection_finds_the_maximum_for_every_budget():
    past = convo(9, size=20)
    newest = {"role": "user", "content": "q"}
    for limit in range(40, 9 * 48 + 40, 7):
        got = run(fit(None, past, newest, CharCounter(), Budget(limit, 0, 0)))
        assert got.tokens <= limit
        if got.kept_turns < 9:  # one more turn would not have fitted
            assert got.tokens + 48 > limit


def test_too_long_when_the_newest_message_alone_exceeds_the_budget():
    with pytest.raises(TooLong) as info:
        run(fit("sys", convo(2), {"role": "user", "content": "z" * 500}, CharCounter(), Budget(600, 100, 10)))
    assert (info.value.tokens, info.value.limit) == (7 + 504, 490)
    assert "needs 511 tokens without any history; the budget is 490" in str(info.value)


def test_an_estimate_that_says_too_long_lets_the_server_decide():
    got = run(fit("sys", convo(2), {"role": "user", "content": "z" * 500}, CharCounter(exact=False), Budget(600, 100, 10)))
    assert got.kept_turns == 0 and not got.exact and got.messages[-1]["content"] == "z" * 500


def test_the_served_max_model_len_wins_over_the_config():
    got = run(fit(None, convo(10), {"role": "user", "content": "q"}, CharCounter(served=400), Budget(100000, 100, 0)))
    assert got.limit == 300 and got.tokens <= 300 and got.kept_turns == 2


def test_turns_group_replies_with_their_question():
    msgs = [{"role": "assistant", "content": "welcome"}, *convo(2), {"role": "assistant", "content": "extra"}]
    assert [len(t) for t in turns(msgs)] == [1, 2, 3]


def test_fallback_estimate_is_an_upper_bound_in_bytes():
    zh = {"role": "user", "content": "文心大模型" * 10}  # 150 UTF-8 bytes
    assert history.estimate([zh]) == history.PER_PROMPT + history.PER_MESSAGE + 150
    article = len(zh["content"]) // 4 + 10  # the common len//4+10 estimate: 22 for 50 characters
    assert article < 50 <= history.estimate([zh])  # a CJK character is at least one token; len//4+10 is not


def test_tokenize_counter_falls_back_when_the_server_is_unreachable():
    import httpx

    async def go():
        async with httpx.AsyncClient() as http:
            counter = history.TokenizeCounter(http, "http://127.0.0.1:9", "m", timeout=2)  # port 9 (discard): refused
            msgs = [{"role": "user", "content": "hello"}]
            got = await counter.count(msgs)
            return got, counter.failures, history.estimate(msgs)

    got, failures, estimate = run(go())
    assert got == Count(estimate, False) and failures == 1
