"""Runs in the chat venv (python-socketio is there): a session whose page moves it to a second websocket before it
began, as Chainlit's page does when its state settles in two steps. Prints one JSON object. Called by
tests/integration/test_chat_app.py.

    python -m tests.harness.resume_race URL USER PASSWORD THREAD_ID   # a reload on a thread
    python -m tests.harness.resume_race URL USER PASSWORD -           # a new chat

Chainlit's page connects through a 200 ms debounce that a new callback does not cancel, so two connects fire when the
page's state (chat profile, thread to resume) changes twice in a row; the page closes the first socket as soon as it
opens the second, which restores the session (the same session id). Two orders, one per form of the command:
- on a thread, the first socket closes before it sent `connection_successful` (a busy machine): both sockets asked
  for the thread, and the second must receive `resume_thread`, not an `on_chat_start` (CI: a reload that did not
  resume);
- a new chat whose first socket began: on_chat_start ran for it, and the second socket must receive it again
  (on_chat_start's step, then task_end), not a bare task_end (CI: a page waiting for a start sent to a socket it had
  dropped: no form, no collections).
What the second socket receives is printed (chat_app/session_moves.py is the fix of both).
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


class Events:
    """What one socket receives of a session's start or resume, in order; `done` once it has ended."""

    def __init__(self, sio: socketio.AsyncClient):
        self.seen: list[str] = []
        self.done = asyncio.Event()
        for name in ("resume_thread", "resume_thread_error", "first_interaction", "new_message", "task_start", "task_end"):
            sio.on(name, self._handler(name))

    def _handler(self, name: str):
        def handler(data=None, *_):
            step = data.get("name") if isinstance(data, dict) else None
            self.seen.append(f"{name}:{step}" if step else name)
            if name == "resume_thread" or (name == "task_end" and self.started):
                self.done.set()

        return handler

    @property
    def started(self) -> bool:
        return any(e.endswith(":on_chat_start") for e in self.seen)

    async def wait(self, seconds: float = 30) -> None:
        with contextlib.suppress(TimeoutError):  # nothing in time: the events say what came
            await asyncio.wait_for(self.done.wait(), seconds)


async def main(url: str, user: str, password: str, thread: str) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        login = await http.post("/login", data={"username": user, "password": password})
        login.raise_for_status()
        cookie = f"access_token={http.cookies['access_token']}"
    new_chat = thread == "-"
    auth = {"sessionId": str(uuid.uuid4()), "clientType": "webapp", "chatProfile": quote(DOCS), "userEnv": "{}",
            "threadId": "" if new_chat else thread}  # fmt: skip

    def where() -> dict:  # a dict each time: engineio takes the Cookie out of the headers it is given
        return {"socketio_path": "/ws/socket.io", "transports": ["websocket"], "headers": {"Cookie": cookie}, "auth": dict(auth)}

    first = socketio.AsyncClient(reconnection=False)
    began = Events(first)
    await first.connect(url, **where())  # the server ran its connect: the session exists
    if new_chat:  # the first socket began, and its start is over
        await first.emit("connection_successful")
        await began.wait()
    await first.disconnect()  # on a thread: closed before it sent connection_successful, as the page closes it
    second = socketio.AsyncClient(reconnection=False)
    events = Events(second)
    await second.connect(url, **where())
    await second.emit("connection_successful")
    await events.wait()
    await asyncio.sleep(0.5)  # anything that follows (a resume after a start would show here)
    await second.disconnect()
    return {"first": began.seen, "resumed": any(e.split(":")[0] == "resume_thread" for e in events.seen), "started": events.started,
            "events": events.seen}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5])), ensure_ascii=False))
