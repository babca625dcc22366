"""Runs in the chat venv (Chainlit is there, not in the test venv): drives `HistoryLayer` through Chainlit's own
context and session objects and prints one JSON object. Called by tests/integration/test_chat_history_layer.py.

    python -m tests.harness.history_layer_probe resume200 DB_URL   # a thread of 200 messages saved, then opened
    python -m tests.harness.history_layer_probe down DB_URL        # writes against a database that cannot be reached
    python -m tests.harness.history_layer_probe hung DB_URL        # writes against a server that never answers

The working directory must be a scratch dir (Chainlit writes .chainlit/ there at import).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta


def _iso(t: datetime) -> str:
    return t.replace(tzinfo=None).isoformat() + "Z"  # as chainlit.utils.utc_now writes it


def messages(thread_id: str, n: int) -> list[dict]:
    t0 = datetime.now(UTC) - timedelta(hours=1)
    out = []
    for i in range(n):
        kind = "user_message" if i % 2 == 0 else "assistant_message"
        text = (f"问题 {i}：" if i % 2 == 0 else f"回答 {i}：") + "零停机切换，健康检查，排空。" * 10
        out.append({"id": str(uuid.uuid4()), "threadId": thread_id, "parentId": None, "type": kind, "name": "alice",
                    "output": text, "input": "", "createdAt": _iso(t0 + timedelta(seconds=i)), "streaming": False,
                    "metadata": {}, "isError": False})  # fmt: skip
    return out


async def resume200(url: str) -> dict:
    from chainlit.context import init_http_context
    from chainlit.types import Feedback, Pagination, ThreadFilter
    from chainlit.user import User

    from ernie_ops.chat_app.data_layer import HistoryLayer
    from ernie_ops.threads.store import ThreadStore

    async def opener():
        return await ThreadStore.open(url)

    layer = HistoryLayer(opener)
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)  # an HTTP session: the layer writes at once (no first-message queue)
    user = await layer.create_user(User(identifier="alice"))
    await layer.update_thread(thread_id, name="两百条消息", user_id=user.id, metadata={"chat_profile": "通用助手 General"})
    steps = messages(thread_id, 200)
    for s in steps:
        await layer.create_step(s)
    await layer.update_step({**steps[-1], "output": steps[-1]["output"] + "（完）"})  # an update merges, no new row
    intruder = await _intrude(layer, thread_id)
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        thread = await layer.get_thread(thread_id)
        timings.append(time.perf_counter() - t)
    listed = await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user.id))
    fid = await layer.upsert_feedback(Feedback(forId=steps[-1]["id"], value=0, comment="不对", threadId=thread_id))
    rated = (await layer.get_thread(thread_id))["steps"][-1].get("feedback")
    await layer.upsert_feedback(Feedback(id=fid, forId=steps[-1]["id"], value=1, comment=None, threadId=thread_id))
    changed = (await layer.get_thread(thread_id))["steps"][-1].get("feedback")
    removed = await layer.delete_feedback(fid)
    after = (await layer.get_thread(thread_id))["steps"][-1].get("feedback")
    await layer.close()
    return {
        "steps": len(thread["steps"]), "ordered": [s["id"] for s in thread["steps"]] == [s["id"] for s in steps],
        "last": thread["steps"][-1]["output"][-3:], "author": await _author(url, thread_id),
        "userIdentifier": thread["userIdentifier"], "listed": [t["id"] for t in listed.data], "thread": thread_id,
        "seconds": timings, "profile": thread["metadata"].get("chat_profile"),
        "feedback": [rated, changed, removed, after], "intruder": intruder,
    }  # fmt: skip


async def _intrude(layer, thread_id: str) -> list[int]:
    """Another user's chat session writes into this thread (as a socket let in while the database was down
    would): nothing lands. Returns the thread's step count before and after, and the name."""
    from chainlit.context import init_http_context, init_ws_context
    from chainlit.session import WebsocketSession
    from chainlit.user import PersistedUser

    before = len((await layer.get_thread(thread_id))["steps"])

    async def emit(event, data):
        pass

    mallory = PersistedUser(id="mallory", identifier="mallory", createdAt="2000-01-01T00:00:00Z")
    session = WebsocketSession(id=str(uuid.uuid4()), socket_id="m", emit=emit, emit_call=None, user_env={}, client_type="webapp",
                               thread_id=thread_id, user=mallory)  # fmt: skip
    session.has_first_interaction = True
    init_ws_context(session)
    for s in messages(thread_id, 2):
        await layer.create_step(s)
    await layer.update_thread(thread_id, name="mallory was here", metadata={"x": 1})
    init_http_context(thread_id=thread_id)
    thread = await layer.get_thread(thread_id)
    return [before, len(thread["steps"]), thread["name"], thread["metadata"].get("x")]


async def _author(url: str, thread_id: str) -> str:
    from ernie_ops.chat_app.data_layer import HistoryLayer
    from ernie_ops.threads.store import ThreadStore

    async def opener():
        return await ThreadStore.open(url)

    layer = HistoryLayer(opener)
    try:
        return await layer.get_thread_author(thread_id)
    finally:
        await layer.close()


async def down(url: str) -> dict:
    """Every write is refused by a real unreachable database; each session is told once, nothing raises."""
    from chainlit.context import init_ws_context
    from chainlit.session import WebsocketSession
    from chainlit.types import Feedback, Pagination, ThreadFilter
    from chainlit.user import User
    from fastapi import HTTPException

    from ernie_ops.chat_app.data_layer import HistoryLayer
    from ernie_ops.threads.store import ThreadStore

    async def opener():
        return await ThreadStore.open(url)

    layer = HistoryLayer(opener)
    toasts: dict[str, list] = {}
    for name in ("s1", "s2"):
        sent = toasts[name] = []

        async def emit(event, data, sent=sent):
            if event == "toast":
                sent.append(data)

        session = WebsocketSession(id=f"{name}-{uuid.uuid4()}", socket_id=name, emit=emit, emit_call=None, user_env={},
                                   client_type="webapp", thread_id=str(uuid.uuid4()))  # fmt: skip
        session.has_first_interaction = True  # past the first message: writes go out at once
        init_ws_context(session)
        for s in messages(session.thread_id, 4):
            await layer.create_step(s)
            await layer.update_step(s)
        await layer.update_thread(session.thread_id, name="x", metadata={"chat_profile": "General"})
        await layer.upsert_feedback(Feedback(forId=str(uuid.uuid4()), value=0, comment="不对"))
    thread = await layer.get_thread(str(uuid.uuid4()))
    user = await layer.get_user("alice") or await layer.create_user(User(identifier="alice"))
    listed = await layer.list_threads(Pagination(first=20), ThreadFilter(userId="alice"))
    try:
        await layer.get_thread_author(str(uuid.uuid4()))
        author = "answered"
    except HTTPException as exc:
        author = exc.status_code
    return {"toasts": toasts, "thread": thread, "user": user.identifier, "listed": listed.data, "author": author}


async def hung(url: str) -> dict:
    """10 messages saved against a server that accepts connections and never answers (frozen, or its address
    black-holed), each session's store opened as the chat app opens it (app.py's `_register_history`: one breaker
    shared by the re-opens), and with a new breaker at each open (every open waits for the connect timeout:
    the app before the breaker). Seconds per message and the toasts each session got."""
    from ernie_ops.threads.breaker import Breaker
    from ernie_ops.threads.store import ThreadStore

    shared = Breaker()
    with_breaker = await _ten_messages(lambda: ThreadStore.open(url, breaker=shared))
    without = await _ten_messages(lambda: ThreadStore.open(url, breaker=Breaker()))
    return {"with": with_breaker, "without": without, "state": shared.state}


async def _ten_messages(opener) -> dict:
    from chainlit.context import init_ws_context
    from chainlit.session import WebsocketSession

    from ernie_ops.chat_app.data_layer import HistoryLayer

    layer = HistoryLayer(opener)
    toasts = []

    async def emit(event, data):
        if event == "toast":
            toasts.append(data)

    session = WebsocketSession(id=str(uuid.uuid4()), socket_id="h", emit=emit, emit_call=None, user_env={},
                               client_type="webapp", thread_id=str(uuid.uuid4()))  # fmt: skip
    session.has_first_interaction = True  # past the first message: writes go out at once
    init_ws_context(session)
    seconds = []
    for s in messages(session.thread_id, 10):
        began = time.perf_counter()
        await layer.create_step(s)
        seconds.append(time.perf_counter() - began)
    await layer.close()
    return {"seconds": seconds, "toasts": len(toasts)}


def main() -> None:
    mode, url = sys.argv[1], sys.argv[2]
    result = asyncio.run({"resume200": resume200, "down": down, "hung": hung}[mode](url))
    print(json.dumps(result, ensure_ascii=False, default=str))


if __name__ == "__main__":
    main()
