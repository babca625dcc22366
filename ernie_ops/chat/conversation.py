"""One chat session end to end, without Chainlit: flow -> history budget -> streaming -> clean-up.

The Chainlit app gives it a `Sink` that writes into `cl.Message`s; the integration tests give it
one that records, and so drive exactly the code the browser uses against real vLLM and nginx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

from ernie_ops.chat import history
from ernie_ops.chat.cleanup import clean
from ernie_ops.chat.client import FRIENDLY, ChatError, GatewayClient, ReplyStats
from ernie_ops.chat.flow import Ask, Busy, Flow, Generate
from ernie_ops.config import ChatConfig, ScenarioConfig

log = logging.getLogger("ernie_ops.chat")


class Sink(Protocol):
    """Where a reply goes: tokens while streaming, then the cleaned text, or a message to the user."""

    async def token(self, piece: str) -> None: ...
    async def finish(self, text: str, source: str | None) -> None: ...
    async def say(self, text: str) -> None: ...
    async def fail(self, text: str) -> None: ...
    async def stopped(self) -> None: ...


@dataclass
class Outcome:
    kind: str  # done | stopped | failed | asked | busy
    stats: ReplyStats | None = None
    fitted: history.Fitted | None = None
    error: Exception | None = None


class Conversation:
    """A session's flow, history and the shared gateway client."""

    def __init__(self, scenario: ScenarioConfig, chat: ChatConfig, budget: history.Budget, client: GatewayClient,
                 counter: history.Counter, user: str = "-"):  # fmt: skip
        self.scenario, self.chat, self.budget = scenario, chat, budget
        self.client, self.counter, self.user = client, counter, user
        self.flow = Flow(scenario)
        self.history: list[history.Message] = []

    async def on_user_message(self, text: str, sink: Sink) -> Outcome:
        step = self.flow.on_user_message(text)
        if isinstance(step, Busy):
            await sink.say(step.text)
            return Outcome("busy")
        if isinstance(step, Ask):
            await sink.say(step.text)
            return Outcome("asked")
        return await self._generate(step, sink)

    async def _generate(self, step: Generate, sink: Sink) -> Outcome:
        newest = {"role": "user", "content": step.user}
        stats = ReplyStats()
        out = Outcome("failed", stats)
        raw: list[str] = []
        try:
            out.fitted = await history.fit(step.system, self.history, newest, self.counter, self.budget)
            stream = self.client.stream(out.fitted.messages, self.chat.max_tokens, self.chat.temperature, stats)
            async with contextlib.aclosing(stream) as pieces:  # a stop closes the upstream request now
                async for piece in pieces:
                    raw.append(piece)
                    await sink.token(piece)
            text = "".join(raw)
            if self.chat.cleanup:
                text = clean(text, self.chat.indent_cjk_paragraphs)
            source = self.flow.values.get(self.scenario.source_field) if self.scenario.source_field else None
            await sink.finish(text, source)
            self.history += [newest, {"role": "assistant", "content": text}]
            out.kind = "done"
        except history.TooLong as exc:
            out.error = exc
            await sink.fail(f"{FRIENDLY['too_long']} ({exc.tokens} tokens > {exc.limit})")
        except ChatError as exc:
            out.error = exc
            if raw:  # the user saw this part: the model should see it too
                self.history += [newest, {"role": "assistant", "content": "".join(raw)}]
            await sink.fail(exc.user_text)
        except asyncio.CancelledError:
            out.kind = "stopped"
            if raw:
                self.history += [newest, {"role": "assistant", "content": "".join(raw)}]
            with contextlib.suppress(Exception):  # best effort: the partial reply stops looking "streaming"
                await sink.stopped()
            raise
        finally:
            self.flow.finished(out.kind)
            self._log(out)
        return out

    def _log(self, out: Outcome) -> None:
        s, f = out.stats, out.fitted
        assert s is not None
        ttft = f"{s.ttft:.3f}s" if s.ttft is not None else "-"
        kept = f"{f.kept_turns}/{f.total_turns}" if f else "-"
        log.info(
            "reply user=%s scenario=%s outcome=%s upstream=%s attempts=%d ttft=%s pieces=%d finish=%s prompt_tokens=%s "
            "limit=%s kept_turns=%s exact=%s tokenize_calls=%s seconds=%.2f%s",
            self.user, self.scenario.name.replace(" ", "_"), out.kind, s.upstream or "-", s.attempts, ttft, s.tokens,
            s.finish_reason or "-", f.tokens if f else "-", f.limit if f else "-", kept, f.exact if f else "-",
            f.calls if f else "-", s.seconds, f" error={out.error}" if out.error else "",
        )  # fmt: skip
