"""A chat `Sink` (ernie_ops/chat/conversation.py) that keeps what the browser would show: for the tests that
drive a `Conversation` without Chainlit (unit tests and the chat backend's integration tests)."""

from __future__ import annotations


class Recorder:
    """A Sink that keeps what the browser would show."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.final: str | None = None
        self.source: str | None = None
        self.sources: list = []
        self.said: list[str] = []
        self.failed: list[str] = []

    async def token(self, piece: str) -> None:
        self.tokens.append(piece)

    async def finish(self, text: str, sources: list) -> None:
        self.final, self.sources = text, sources
        self.source = next((s.text for s in sources if s.display == "inline"), None)

    async def say(self, text: str) -> None:
        self.said.append(text)

    async def fail(self, text: str) -> None:
        self.failed.append(text)

    async def stopped(self) -> None:
        self.said.append("(stopped)")
