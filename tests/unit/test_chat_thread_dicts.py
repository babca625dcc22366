"""The Chainlit adapter's pure half (chat/thread_dicts.py) and `Conversation.restore`: what a resumed thread
gives the model, and that the history budget counts the restored messages. No Chainlit here (the data
layer itself runs in the chat venv: tests/integration/test_chat_app.py)."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from ernie_ops import config
from ernie_ops.chat import history, thread_dicts
from ernie_ops.chat.conversation import Conversation
from ernie_ops.client.gateway import GatewayClient, Timeouts
from tests.harness.recording_sink import Recorder


class CharCounter:
    """1 token per character + 4 per message: the budget's arithmetic, exactly."""

    async def count(self, messages):
        return history.Count(sum(len(m["content"]) + 4 for m in messages), True, None)


def steps(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"id": f"u{i}", "type": "user_message", "output": f"问题{i:02d}" + "x" * 40})
        out.append({"id": f"a{i}", "type": "assistant_message", "output": f"回答{i:02d}" + "y" * 40})
    return out


def first_reply_prompt(restored: list[dict], limit: int):
    """The prompt the first message after a resume would send (the gateway refuses: fit runs, nothing streams)."""
    chat = config.parse("").chat
    general = chat.effective_scenarios()[0]
    with socket.socket() as s:  # bound, not listening: a real refusal after the prompt is fitted
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        client = GatewayClient(url, "m", Timeouts(connect=2, read=2, reply=5))
        conv = Conversation(general, chat, history.Budget(limit, 0, 0), client, CharCounter())
        conv.restore(restored)
        out = asyncio.run(conv.on_user_message("接着说", Recorder()))
    return out.fitted


def test_a_resumed_threads_messages_are_the_next_prompts_history():
    restored = thread_dicts.conversation_messages(steps(3))
    fitted = first_reply_prompt(restored, 100_000)
    roles = [m["role"] for m in fitted.messages]
    assert roles == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert fitted.messages[1]["content"].startswith("问题00") and fitted.messages[-1]["content"] == "接着说"
    assert fitted.kept_turns == fitted.total_turns == 3


def test_the_budget_counts_restored_messages_and_drops_the_oldest_turns():
    restored = thread_dicts.conversation_messages(steps(20))  # 20 turns of 2 x (44 + 4) = 96 tokens
    chat = config.parse("").chat
    system = len(chat.effective_scenarios()[0].system_prompt) + 4
    limit = system + (len("接着说") + 4) + 5 * 96 + 10  # room for five turns, not six
    fitted = first_reply_prompt(restored, limit)
    assert fitted.total_turns == 20 and fitted.kept_turns == 5
    assert fitted.tokens <= fitted.limit == limit
    kept = [m["content"][:4] for m in fitted.messages if m["role"] == "user"][:-1]
    assert kept == ["问题15", "问题16", "问题17", "问题18", "问题19"]


def test_conversation_messages_leave_out_errors_tools_and_empty_steps():
    got = thread_dicts.conversation_messages(
        [
            {"type": "user_message", "output": "你好"},
            {"type": "tool", "name": "索引文档 / Indexing", "output": "a.md"},
            {"type": "assistant_message", "output": "模型服务暂时无法连接", "isError": True},
            {"type": "assistant_message", "output": "  "},
            {"type": "assistant_message", "output": "你好！"},
            {"type": "run", "output": "on_chat_start"},
        ]
    )
    assert got == [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "你好！"}]


def test_restore_keeps_only_user_and_assistant_text():
    chat = config.parse("").chat
    conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(4096, 256, 16), client=None, counter=None)  # type: ignore[arg-type]
    conv.restore([{"role": "system", "content": "x"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": ""}])
    assert conv.history == [{"role": "user", "content": "q"}]


def row(**kw):
    created = datetime.now(UTC) - timedelta(days=1)
    base = dict(id="t1", user="alice", name="回滚", created_at=created, updated_at=created, metadata={"chat_profile": "General"}, tags=[])
    return SimpleNamespace(**(base | kw))


def test_thread_dict_names_the_author_and_gives_stored_elements_our_route():
    r = row()
    elements = [
        {"id": "e1", "threadId": "t1", "name": "【1】", "type": "text", "chainlitKey": "dead-session-file"},
        {"id": "e2", "threadId": "t1", "name": "logo", "type": "image", "url": "https://cdn.example/logo.png"},
    ]
    got = thread_dicts.thread_dict(r, [{"id": "s1", "type": "user_message", "output": "q"}], elements, "/chat")
    assert got["userIdentifier"] == got["userId"] == "alice" and got["createdAt"] == r.created_at.isoformat()
    assert got["metadata"] == {"chat_profile": "General"} and got["steps"][0]["id"] == "s1"
    assert got["elements"][0]["url"] == "/chat/history/element/t1/e1" and got["elements"][0]["chainlitKey"] is None
    assert got["elements"][1]["url"] == "https://cdn.example/logo.png"  # hosted elsewhere: kept


def test_element_bytes_from_content_or_path(tmp_path):
    f = tmp_path / "a.md"
    f.write_bytes("# 回滚\n".encode())
    assert thread_dicts.element_bytes("【1】 段落", None) == "【1】 段落".encode()
    assert thread_dicts.element_bytes(b"\x00\x01", str(f)) == b"\x00\x01"
    assert thread_dicts.element_bytes(None, str(f)) == "# 回滚\n".encode()
    assert thread_dicts.element_bytes(None, None) is None
    stored = thread_dicts.element_for_store({"id": "e", "chainlitKey": "k", "path": str(f), "name": "a.md"})
    assert stored == {"id": "e", "name": "a.md"}


def test_each_session_is_told_once_that_history_is_not_saved():
    notice = thread_dicts.SaveNotice()
    assert notice.first("s1") == thread_dicts.NOT_SAVED
    assert notice.first("s1") is None and notice.first("s1") is None
    assert notice.first("s2") == thread_dicts.NOT_SAVED  # another user's session is told too
    assert notice.first(None) is None  # no session (an HTTP route): nobody to tell


def test_stored_bytes_a_browser_could_run_are_served_as_a_download():
    assert thread_dicts.served_as("text/html") == ("application/octet-stream", "attachment")
    assert thread_dicts.served_as("image/svg+xml") == ("application/octet-stream", "attachment")
    assert thread_dicts.served_as(None) == ("application/octet-stream", "attachment")
    assert thread_dicts.served_as("text/plain") == ("text/plain", "inline")
    assert thread_dicts.served_as("application/pdf") == ("application/pdf", "inline")


def test_a_threads_elements_come_back_in_the_order_they_were_sent():
    stored = [
        {"id": "a", "threadId": "t1", "orderNs": 30},
        {"id": "b", "threadId": "t1", "orderNs": 10},
        {"id": "c", "threadId": "t1", "orderNs": 20},
    ]
    got = thread_dicts.thread_dict(row(), [], stored)
    assert [e["id"] for e in got["elements"]] == ["b", "c", "a"]


def test_a_resumed_docs_thread_numbers_its_passages_on_from_the_highest_shown():
    shown = [{"name": "【1】"}, {"name": "【12】"}, {"name": "rollback.md"}, {"name": "【3】"}, {"name": "x【4】"}]
    assert thread_dicts.sources_shown(shown) == 12
    assert thread_dicts.sources_shown([{"name": "OnboardingItem"}]) == 0


def test_a_resumed_support_thread_keeps_the_phone_its_user_gave_and_the_address_completes_the_request():
    chat = config.parse("").chat
    support = next(s for s in chat.effective_scenarios() if s.fields)
    stored = [
        {"type": "user_message", "output": "我的快递三天了还没到。电话：13800138000"},
        {"type": "assistant_message", "output": "请提供以下信息 / Please provide:\n- 地址 address"},
    ]
    with socket.socket() as s:  # bound, not listening: a real refusal after the prompt is fitted
        s.bind(("127.0.0.1", 0))
        client = GatewayClient(f"http://127.0.0.1:{s.getsockname()[1]}", "m", Timeouts(connect=2, read=2, reply=5))
        conv = Conversation(support, chat, history.Budget(100_000, 0, 0), client, CharCounter())
        conv.restore(thread_dicts.conversation_messages(stored))
        assert conv.flow.state == "collecting_info" and conv.flow.values == {"phone": "13800138000"}
        said = Recorder()
        out = asyncio.run(conv.on_user_message("北京市海淀区中关村大街1号", said))
    assert said.said == [] and out.fitted is not None  # not asked again: the request went to the model
    sent = out.fitted.messages[-1]["content"]
    assert sent.startswith("客户的问题：我的快递三天了还没到\n联系电话：13800138000\n地址：北京市海淀区中关村大街1号"), sent
    assert "- 联系电话 phone: 13800138000" in out.fitted.messages[0]["content"]
