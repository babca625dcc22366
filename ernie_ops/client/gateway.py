"""Streaming chat replies from the gateway (never a fixed instance) with httpx.

- Timeouts come from the config: connect, read (the longest silence between two chunks, and the
  wait for the response head), and the whole reply.
- One retry, only when the request failed before any response byte arrived (connect refused or
  reset, the server closed the connection unanswered: the nginx-reload keep-alive race). A reply
  that started is never repeated: the user saw part of it, and the model would answer differently.
- Every failure becomes a `ChatError` with a `kind` and a sentence for the user, never a traceback.
- Cancelling the consuming task (Chainlit's stop button) closes the response, and with it the
  connection; nginx then closes its upstream connection and vLLM aborts the generation. Consume
  `stream()` inside `contextlib.aclosing` so that happens at once, not when the generator is collected.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import httpx

from ernie_ops.client import sse
from ernie_ops.client.headers import SESSION_HEADER, UPSTREAM_HEADER
from ernie_ops.client.retry import BeforeFirstByte, send_streamed
from ernie_ops.errors import ErnieOpsError

FRIENDLY = {
    "down": "模型服务暂时无法连接，请稍后再试。 / The model service cannot be reached right now; please try again in a moment.",
    "server": "模型服务出错了，没有给出回复，请再试一次。 / The model service failed to answer; please try again.",
    "broken": "回复中途断开了，上面是已收到的部分，请重新提问。 / The reply was cut off; what arrived is shown above. Please ask again.",
    "timeout": "模型服务响应超时，请稍后再试。 / The model service took too long to answer; please try again later.",
    "too_long": "这条消息太长，模型无法处理，请缩短后再发。 / This message is too long for the model; please shorten it.",
    "refused": "网关拒绝了请求，请联系管理员。 / The gateway refused the request; please contact an administrator.",
    "busy": "模型服务繁忙，请稍后再试。 / The model service is busy; please try again shortly.",
}


class ChatError(ErnieOpsError):
    """A reply that could not be (completely) delivered; `user_text` is what the chat shows."""

    def __init__(self, kind: str, detail: str):
        self.kind, self.detail = kind, detail
        self.user_text = FRIENDLY[kind]
        super().__init__(f"{kind}: {detail}")


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    read: float = 60.0
    reply: float = 600.0

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.read, pool=self.connect)


@dataclass
class ReplyStats:
    """What one reply did, for the log line and the tests."""

    started: float = field(default_factory=time.perf_counter)
    attempts: int = 0
    upstream: str = ""
    ttft: float | None = None
    tokens: int = 0
    finish_reason: str | None = None
    seconds: float = 0.0


def _status_error(status: int, body: str) -> ChatError:
    detail = f"HTTP {status}: {body[:300]}"
    if status == 400 and "maximum context length" in body:
        return ChatError("too_long", detail)
    if status in (401, 403):
        return ChatError("refused", detail)
    if status == 429:
        return ChatError("busy", detail)
    if status in (502, 503, 504):
        return ChatError("down", detail)
    if status >= 500:
        return ChatError("server", detail)
    return ChatError("refused", detail)


class GatewayClient:
    """One per app process: a connection pool to the gateway, shared by every session."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeouts: Timeouts,
        api_key: str | None = None,
        extra_body: dict | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url, self.model, self.timeouts = base_url.rstrip("/"), model, timeouts
        self.extra_body = dict(extra_body or {})
        self.http = httpx.AsyncClient(timeout=timeouts.httpx(), headers=headers, verify=verify)

    @classmethod
    def from_config(cls, cfg, env: Mapping[str, str]) -> GatewayClient:
        """The chat section's gateway (never a fixed instance), model and timeouts; the API key from the
        environment (ERNIE_OPS_API_KEY, the chat unit's EnvironmentFile), never the YAML."""
        chat = cfg.chat
        return cls(
            cfg.chat_gateway_url(),
            cfg.model.served_name,
            Timeouts(chat.connect_timeout_seconds, chat.read_timeout_seconds, chat.reply_timeout_seconds),
            api_key=env.get("ERNIE_OPS_API_KEY") or None,
            extra_body=chat.extra_body,
            verify=cfg.gateway.tls_verify(),  # an https gateway's certificate, as any client checks it
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _open(self, body: dict, stats: ReplyStats, session: str | None = None) -> httpx.Response:
        url = f"{self.base_url}/v1/chat/completions"
        headers = {SESSION_HEADER: session} if session else None

        def attempt(n: int) -> None:
            stats.attempts = n

        try:
            return await send_streamed(self.http, lambda: self.http.build_request("POST", url, json=body, headers=headers), 2, attempt)
        except (httpx.ReadTimeout, httpx.PoolTimeout) as exc:
            raise ChatError("timeout", f"no response head within {self.timeouts.read:g}s ({type(exc).__name__})") from None
        except BeforeFirstByte as exc:
            raise ChatError("down", f"{self.base_url}: {type(exc.last).__name__}: {exc.last} (after one retry)") from None

    async def stream(
        self,
        messages: list[dict],
        max_tokens: int,
        temperature: float,
        stats: ReplyStats | None = None,
        extra: dict | None = None,
        session: str | None = None,
    ) -> AsyncIterator[str]:
        """Yield the reply's text pieces as they arrive; raise ChatError on any failure.
        `extra`: more request fields for this call only (e.g. response_format). `session`: the conversation's key (the
        chat's thread id), sent as X-Session-Id: the gateway keeps a conversation on one replica of a pool, where its
        growing prefix is cached."""
        stats = stats if stats is not None else ReplyStats()
        body = {
            **self.extra_body,
            **(extra or {}),
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
        }
        deadline = time.monotonic() + self.timeouts.reply
        resp = await self._open(body, stats, session)
        try:
            stats.upstream = resp.headers.get(UPSTREAM_HEADER, "")
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")
                raise _status_error(resp.status_code, text)
            done = False
            raw = resp.aiter_raw()
            events = sse.aiter_data(raw)
            try:
                async for data in events:
                    if data == sse.DONE:
                        done = True
                        break
                    piece = _piece(data, stats)
                    if piece:
                        if stats.ttft is None:
                            stats.ttft = time.perf_counter() - stats.started
                        stats.tokens += 1
                        yield piece
                    if time.monotonic() > deadline:
                        raise ChatError("timeout", f"the reply took longer than {self.timeouts.reply:g}s")
            except httpx.ReadTimeout:
                raise ChatError("timeout", f"no data for {self.timeouts.read:g}s in the middle of the reply") from None
            except httpx.HTTPError as exc:
                raise ChatError("broken", f"stream broke after {stats.tokens} pieces: {type(exc).__name__}: {exc}") from None
            finally:
                # A consumer cancelled while we wait at `yield` (Chainlit's stop during a UI update) leaves
                # httpx/httpcore's nested generators suspended; finalised later in another task, they try
                # to close a still-open connection ("async generator ignored GeneratorExit", "cancel scope
                # in a different task"). Closed response first, their clean-up finds nothing left to do.
                await resp.aclose()
                await events.aclose()
                await raw.aclose()
            if not done:
                raise ChatError("broken", f"stream ended without [DONE] after {stats.tokens} pieces")
        finally:
            stats.seconds = time.perf_counter() - stats.started
            await resp.aclose()

    async def complete(
        self,
        messages: list[dict],
        max_tokens: int,
        temperature: float,
        stats: ReplyStats | None = None,
        extra: dict | None = None,
        session: str | None = None,
    ) -> str:
        """The whole reply as one string (streamed underneath, with the same timeouts, retry and errors)."""
        async with contextlib.aclosing(self.stream(messages, max_tokens, temperature, stats, extra, session)) as pieces:
            return "".join([piece async for piece in pieces])


def _piece(data: str, stats: ReplyStats) -> str:
    """The text of one SSE chunk; an error event from vLLM (e.g. an abort at shutdown) breaks the stream."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ChatError("broken", f"not JSON in the stream: {data[:120]!r}") from None
    if not isinstance(chunk, dict):
        raise ChatError("broken", f"unexpected chunk: {data[:120]!r}")
    if "error" in chunk:
        raise ChatError("broken", f"error event in the stream: {json.dumps(chunk['error'])[:300]}")
    choices = chunk.get("choices") or []
    if not choices:
        return ""  # a usage-only chunk
    choice = choices[0]
    stats.finish_reason = choice.get("finish_reason") or stats.finish_reason
    return (choice.get("delta") or {}).get("content") or ""
