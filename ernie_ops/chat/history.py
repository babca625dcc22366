"""History cut to the real token budget: counts from vLLM's /tokenize, an estimate only as fallback.

Budget for the prompt = max_model_len - max_tokens - margin, with max_model_len as the serving
instance reports it in each /tokenize answer (the config's value only when /tokenize fails). The
system prompt and the newest user turn are always kept whole; older turns (a user message and the
replies to it) are dropped whole, oldest first - never cut mid-message.

Counting: /tokenize with the very messages and chat template the completion will use
(`add_generation_prompt`), so the count is the prompt length vLLM will see. The prompt length
grows with every turn kept, so the most turns that fit are found by bisection: one call when the
whole history fits (the usual case), about 2 + log2(turns) when it does not.

The common estimate `len(text) // 4 + 10` per message (used because "the ERNIE tokenizer is not published";
it is, and vLLM serves it) under-counts Chinese several-fold (about one token per character),
so a long Chinese chat would overflow. The fallback here is an upper bound instead: one token per UTF-8
byte plus template overhead, since every token of a byte-level BPE or of SentencePiece with byte
fallback covers at least one byte. Overestimating only drops more history; it never overflows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import httpx

from ernie_ops.errors import ErnieOpsError

log = logging.getLogger("ernie_ops.chat")

Message = dict[str, str]
PER_MESSAGE = 8  # role markers and separators of a chat template, counted generously
PER_PROMPT = 16  # BOS, the generation prompt


@dataclass(frozen=True)
class Budget:
    max_model_len: int  # the config's vllm.max_model_len: used only when the server's is unknown
    max_tokens: int
    margin: int

    def limit(self, served_max_model_len: int | None = None) -> int:
        return (served_max_model_len or self.max_model_len) - self.max_tokens - self.margin


@dataclass(frozen=True)
class Count:
    tokens: int
    exact: bool
    max_model_len: int | None = None


class Counter(Protocol):
    async def count(self, messages: list[Message]) -> Count: ...


def estimate(messages: list[Message]) -> int:
    """An upper bound of the prompt's tokens without a tokenizer (see the module docstring)."""
    return PER_PROMPT + sum(PER_MESSAGE + len(m["content"].encode("utf-8")) for m in messages)


class TokenizeCounter:
    """Counts with the served model's tokenizer through the gateway's /tokenize."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, model: str, timeout: float = 10.0):
        self.http, self.url, self.model, self.timeout = http, f"{base_url.rstrip('/')}/tokenize", model, timeout
        self.failures = 0

    async def count(self, messages: list[Message]) -> Count:
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        try:
            r = await self.http.post(self.url, json=body, timeout=self.timeout)
            r.raise_for_status()
            data = r.json()
            return Count(int(data["count"]), True, int(data["max_model_len"]) if data.get("max_model_len") else None)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.failures += 1
            log.warning("history: /tokenize failed (%s); using the upper-bound estimate", _describe(exc))
            return Count(estimate(messages), False)


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}: {exc.response.text[:200]}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class TooLong(ErnieOpsError):
    """The system prompt and the newest message alone exceed the budget."""

    def __init__(self, tokens: int, limit: int):
        self.tokens, self.limit = tokens, limit
        super().__init__(f"the prompt needs {tokens} tokens without any history; the budget is {limit}")


@dataclass(frozen=True)
class Fitted:
    messages: list[Message]
    tokens: int
    limit: int
    kept_turns: int
    total_turns: int
    exact: bool
    calls: int


def turns(past: list[Message]) -> list[list[Message]]:
    """Group past messages into turns: each starts at a user message (leading replies form one too)."""
    out: list[list[Message]] = []
    for m in past:
        if m["role"] == "user" or not out:
            out.append([m])
        else:
            out[-1].append(m)
    return out


async def fit(system: str | None, past: list[Message], newest: Message, counter: Counter, budget: Budget) -> Fitted:
    """The messages to send: system prompt, as many of the newest past turns as fit, the newest message."""
    head = [{"role": "system", "content": system}] if system else []
    groups = turns([m for m in past if m["role"] != "system"])
    calls = 0
    served: int | None = None

    def prompt(kept: int) -> list[Message]:
        kept_msgs = [m for g in groups[len(groups) - kept :] for m in g] if kept else []
        return [*head, *kept_msgs, newest]

    async def measure(kept: int) -> Count:
        nonlocal calls, served
        calls += 1
        c = await counter.count(prompt(kept))
        served = c.max_model_len or served
        return c

    def done(kept: int, c: Count) -> Fitted:
        return Fitted(prompt(kept), c.tokens, budget.limit(served), kept, len(groups), c.exact, calls)

    full = await measure(len(groups))
    if full.tokens <= budget.limit(served):
        return done(len(groups), full)
    alone = await measure(0) if groups else full
    if alone.tokens > budget.limit(served):
        if alone.exact:
            raise TooLong(alone.tokens, budget.limit(served))
        return done(0, alone)  # only an estimate says so: let the server decide
    lo, lo_count, hi = 0, alone, len(groups)  # prompt(lo) fits, prompt(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        c = await measure(mid)
        if c.tokens <= budget.limit(served):
            lo, lo_count = mid, c
        else:
            hi = mid
    return done(lo, lo_count)
