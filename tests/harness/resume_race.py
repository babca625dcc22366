"""Runs in the chat venv (python-socketio is there): a page reloaded on a thread whose first websocket closes before
it began, as Chainlit's page does when its state settles in two steps. Prints one JSON object. Called by
tests/integration/test_chat_app.py.

    python -m tests.harness.resume_race URL USER PASSWORD THREAD_ID

Chainlit's page connects through a 200 ms debounce that a new callback does not cancel, so two connects fire when the
page's state (chat profile, thread to resume) changes twice in a row; the page closes the first socket as soon as it
opens the second. On a busy machine the first has not yet sent `connection_successful` then: the server made the
session on its connect, and the second socket, with the same session id, restores that session. Both sockets ask
for the thread (`threadId` in their auth). What the second socket then receives is printed: `resume_thread` (the
thread is back) or only an `on_chat_start` (a new chat on the thread's page: CI, a reload that did not resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from urllib.parse import quote

import httpx
import socketio

DOCS = "文档问答 Docs"


async def main(url: str, user: str, password: str, thread: str) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        login = await http.post("/login", data={"username": user, "password": password})
        login.raise_for_status()
        cookie = f"access_token={http.cookies['access_token']}"
    auth = {"sessionId": str(uuid.uuid4()), "clientType": "webapp", "chatProfile": quote(DOCS), "userEnv": "{}", "threadId": thread}

    def where() -> dict:  # a dict each time: engineio takes the Cookie out of the headers it is given
        return {"socketio_path": "/ws/socket.io", "transports": ["websocket"], "headers": {"Cookie": cookie}, "auth": dict(auth)}

    first = socketio.AsyncClient(reconnection=False)
    await first.connect(url, **where())  # the server ran its connect: the session exists and asked for the thread
    await first.disconnect()  # closed before it sent connection_successful, as the page closes it
    events: list[str] = []
    done = asyncio.Event()
    second = socketio.AsyncClient(reconnection=False)

    def seen(name: str):
        def handler(data=None, *_):
            step = data.get("name") if isinstance(data, dict) else None
            events.append(f"{name}:{step}" if step else name)
            if name == "resume_thread" or (name == "task_end" and any(e.endswith(":on_chat_start") for e in events)):
                done.set()

        return handler

    for name in ("resume_thread", "resume_thread_error", "first_interaction", "new_message", "task_end"):
        second.on(name, seen(name))
    await second.connect(url, **where())
    await second.emit("connection_successful")
    with contextlib.suppress(TimeoutError):  # neither in 30 s: the events say what came
        await asyncio.wait_for(done.wait(), 30)
    await asyncio.sleep(0.5)  # anything that follows (a resume after a start would show here)
    await second.disconnect()
    return {"resumed": any(e.split(":")[0] == "resume_thread" for e in events), "events": events}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5])), ensure_ascii=False))
