"""Answers in flight across a stop or restart of the chat app (issue 34, item 8).

`systemctl restart ernie-chainlit` (every site.yml with a chat change) used to cut an answer mid-stream: the reloaded
thread showed the question and nothing, the history held no answer. Now a stop first drains: new messages get a
sentence (send it again in a moment), the answers being streamed finish within `chat.restart_drain_seconds` and are
stored as any answer is, on the page's open websocket; one still running at the bound is cut, stored as far as it
was streamed with a visible mark, so the user sees what happened and can ask again. Then uvicorn's own shutdown
closes the connections, and the page reconnects to the new app (systemd's socket holds the port meanwhile).

One `Replies` per process (`REPLIES`): the app registers each reply (`reply()`), the data layer each history write
(`writing()`: Chainlit stores a message by a task of its own, `asyncio.create_task(data_layer.create_step(...))`, so
an answer's handler can return before its text is in the database; a fresh clone's restart lost one that way), the
server's shutdown calls `drain`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

RESTARTING = "聊天服务正在重启，请稍后重新发送这条消息。 / The chat is restarting: send this message again in a moment."
INTERRUPTED = "\n\n（回答被中断：聊天服务重启。请重新提问。 / Interrupted: the chat restarted. Please ask again.）"


class Replies:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task] = set()
        self.draining = False  # a stop has begun: no new message is answered
        self.cut = False  # the bound passed: the replies cancelled now were cut by the stop, not by the user
        self.writes = 0  # history writes under way (the data layer's)

    @contextlib.asynccontextmanager
    async def reply(self) -> AsyncIterator[None]:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            yield
        finally:
            self.tasks.discard(task)

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        self.writes += 1
        try:
            yield
        finally:
            self.writes -= 1

    async def drain(self, bound: float, grace: float = 3.0) -> tuple[int, int]:
        """Stop taking messages; wait up to `bound` seconds for the replies in flight, then cancel the rest (each
        stores what it streamed, marked) and give them `grace` seconds to do so; then up to `grace` seconds more for
        the history writes they left under way. Returns (finished, cut)."""
        self.draining = True
        started = len(self.tasks)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while self.tasks and loop.time() < deadline:
            await asyncio.sleep(0.1)
        left = list(self.tasks)
        if left:
            self.cut = True
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=grace)
        await asyncio.sleep(0.05)  # a write task created by the last reply starts at the loop's next turns
        writes_until = loop.time() + grace
        while self.writes and loop.time() < writes_until:
            await asyncio.sleep(0.05)
        return started - len(left), len(left)


REPLIES = Replies()
