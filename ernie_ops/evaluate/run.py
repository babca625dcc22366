"""A golden set's cases through the real pipelines, and the pass rate.

`messages` cases are sent as they are (greedy: temperature 0, the set's max_tokens). `copy` cases are a marketing
request through `marketing.generate.CopyWriter` with chat.marketing's rules, tries and channel limits (greedy too;
their max_tokens are chat.marketing's, the JSON answer needs them): each post must end within the rules. `docs` cases run the chat
app's document Q&A turn (`chat.conversation.Conversation` with the built-in Docs scenario): lexical retrieval and
its relevance gate, the numbered-passages prompt fitted to the token budget, the reply's clean-up and the 【n】
markers `docs.cite` places. Their passages are indexed into a temporary index, one collection per case, or come
from a collection of the configured index. The dense ranking (chat.docs.embeddings) is left out: the set judges
the model, and an embedding server would be a second thing that can change the result. `onboarding` cases ask for a new
employee's welcome as the chat app's onboarding helper does (`onboarding.service.welcome_writer` with the built-in
Onboarding scenario's persona, WELCOME_RULES and chat.onboarding.welcome_max_tokens; greedy) and judge it with the
fact check that decides whether the product pushes it (`service.refusal` against the plan from chat.onboarding's
templates): a refused welcome fails the case, with the reason.

`run_set(loaded, client)` takes any client with the `GatewayClient.stream` signature (tests give one with fixed
answers); `evaluate(path, target)` builds the real one and is what a gate calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Protocol

from ernie_ops.chat import history
from ernie_ops.chat.config import ChatConfig, ScenarioConfig
from ernie_ops.chat.conversation import Conversation, Source
from ernie_ops.client.gateway import ChatError, GatewayClient, ReplyStats, Timeouts
from ernie_ops.config import Config
from ernie_ops.docs import ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.retrieve import Retrieved, Retriever
from ernie_ops.docs.store import Index, Scope
from ernie_ops.errors import ErnieOpsError, UsageError
from ernie_ops.evaluate import golden as g
from ernie_ops.evaluate import score
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import CopyRequest, CopyWriter, FormError
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import Facts, build_plan
from ernie_ops.onboarding.service import WELCOME_RULES, refusal, welcome_writer

TEMPERATURE = 0.0  # greedy: the same model and set give the same answers, so a changed answer means a changed model


class TargetDown(ErnieOpsError):
    """The model cannot be reached at all: no case could be judged."""


class Client(Protocol):
    def stream(
        self, messages: list[dict], max_tokens: int, temperature: float, stats: ReplyStats | None = None, extra: dict | None = None
    ) -> AsyncIterator[str]: ...


@dataclass
class CaseResult:
    id: str
    kind: str
    weight: float
    passed: bool
    answer: str
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cited: list[int] | None = None  # docs: the passage numbers the answer's markers point at

    def as_dict(self) -> dict:
        out = {"id": self.id, "kind": self.kind, "weight": self.weight, "passed": self.passed, "answer": self.answer,
               "failures": self.failures, "seconds": round(self.seconds, 3)}  # fmt: skip
        return out | ({"cited": self.cited} if self.cited is not None else {})


@dataclass
class EvalReport:
    cases: list[CaseResult]
    seconds: float = 0.0
    target: str = ""

    @property
    def pass_rate(self) -> float:
        return score.pass_rate([(c.passed, c.weight) for c in self.cases])

    @property
    def failing(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "pass_rate": round(self.pass_rate, 4),
            "passed": len(self.cases) - len(self.failing),
            "cases": len(self.cases),
            "seconds": round(self.seconds, 2),
            "results": [c.as_dict() for c in self.cases],
        }


@dataclass(frozen=True)
class Target:
    """Where the set is run: an instance (http://127.0.0.1:PORT) or the gateway, and the served model's name."""

    url: str
    model: str
    api_key: str | None = None
    verify: object = True  # an ssl.SSLContext for an https gateway with its own CA
    max_model_len: int = 2048  # the budget's fallback when /tokenize does not say
    docs: DocsConfig = field(default_factory=DocsConfig)  # tokenizer, top_k, min_coverage; index_file for `collection` cases
    marketing: MarketingConfig = field(default_factory=MarketingConfig)  # rules, tries, channel limits of `copy` cases
    onboarding: OnboardingConfig = field(default_factory=OnboardingConfig)  # templates, welcome tokens of `onboarding` cases

    @classmethod
    def for_instance(cls, cfg: Config, port: int) -> Target:
        """One instance on this host (http://127.0.0.1:PORT), bypassing nginx: what a cutover's quality gate judges."""
        return cls._of(cfg, f"http://127.0.0.1:{port}")

    @classmethod
    def for_gateway(cls, cfg: Config) -> Target:
        """The gateway (with its CA for an https url, and the API key from $ERNIE_OPS_API_KEY), as clients reach it."""
        return cls._of(cfg, cfg.gateway.url.rstrip("/"))

    @classmethod
    def _of(cls, cfg: Config, url: str) -> Target:
        verify = cfg.gateway.tls_verify() if url.startswith("https:") else True
        key = os.environ.get("ERNIE_OPS_API_KEY") or None
        return cls(url, cfg.model.served_name, key, verify, cfg.vllm.max_model_len, cfg.chat.docs, cfg.chat.marketing,
                   cfg.chat.onboarding)  # fmt: skip


class EstimateCounter:
    """The history budget's upper-bound estimate (no /tokenize), for clients without a server behind them."""

    async def count(self, messages: list[history.Message]) -> history.Count:
        return history.Count(history.estimate(messages), False)


class QuietSink:
    """Takes what the chat page would show; the judged answer is the conversation's own record of it."""

    def __init__(self) -> None:
        self.said: list[str] = []

    async def token(self, piece: str) -> None:
        pass

    async def finish(self, text: str, sources: list[Source]) -> None:
        pass

    async def say(self, text: str) -> None:
        self.said.append(text)

    async def fail(self, text: str) -> None:
        self.said.append(text)

    async def stopped(self) -> None:
        pass


class CollectionDocs:
    """A case's retrieval, as `Conversation` asks a DocsSession for it: one collection of one index."""

    def __init__(self, index: Index, cfg: DocsConfig, collection: str):
        self.index, self.cfg, self.collection = index, cfg, collection

    async def retrieve(self, question: str) -> Retrieved:
        return Retriever(self.index, self.cfg).search(question, Scope(collections=[self.collection]))


def docs_scenario() -> ScenarioConfig:
    """The built-in document Q&A scenario (its system prompt is the one users get)."""
    return next(s for s in ChatConfig().effective_scenarios() if s.retrieval)


def onboarding_scenario() -> ScenarioConfig:
    """The built-in onboarding scenario (its persona is the one the welcome is written with)."""
    return next(s for s in ChatConfig().effective_scenarios() if s.tool == "onboarding")


def run_set(loaded: g.Loaded, client: Client, *, target: Target | None = None,
            counter: history.Counter | None = None) -> EvalReport:  # fmt: skip
    """Every case of the set, in order; TargetDown when the model cannot be reached."""
    return asyncio.run(run_cases(loaded, client, target=target, counter=counter))


async def run_cases(
    loaded: g.Loaded, client: Client, *, target: Target | None = None, counter: history.Counter | None = None
) -> EvalReport:
    target = target or Target(url="", model="")
    counter = counter or EstimateCounter()
    started = time.perf_counter()
    results = []
    with contextlib.ExitStack() as stack:
        indexes = _Indexes(stack, target.docs, loaded)
        for i, case in enumerate(loaded.golden.cases):
            t0 = time.perf_counter()
            if case.messages is not None:
                result = await _messages_case(case, loaded.golden.defaults, client, target)
            elif case.copy_ is not None:
                result = await _copy_case(case, client, target)
            elif case.onboarding is not None:
                result = await _onboarding_case(case, client, target)
            else:
                index, collection = indexes.for_case(i, case)
                result = await _docs_case(case, loaded.golden.defaults, client, counter, target, index, collection)
            result.seconds = time.perf_counter() - t0
            results.append(result)
    return EvalReport(results, time.perf_counter() - started, target.url)


class _Indexes:
    """A temporary index for the cases' own passages (filled once, a collection per case), the configured one
    for `collection` cases (opened only when a case names one)."""

    def __init__(self, stack: contextlib.ExitStack, cfg: DocsConfig, loaded: g.Loaded):
        self.stack, self.cfg, self.loaded = stack, cfg, loaded
        self.temp: Index | None = None
        self.configured: Index | None = None

    def for_case(self, i: int, case: g.Case) -> tuple[Index, str]:
        assert case.docs is not None
        if case.docs.collection is not None:
            return self._configured(), case.docs.collection
        if self.temp is None:
            tmp = self.stack.enter_context(tempfile.TemporaryDirectory(prefix="ernie-eval-"))
            self.temp = self.stack.enter_context(Index(Path(tmp) / "index.sqlite", tokenizer=self.cfg.tokenizer))
        collection = f"case{i}"
        for j, text in enumerate(case.docs.passages, 1):
            self._add(text.encode("utf-8"), f"passage-{j}.txt", collection)
        for name in case.docs.files:
            self._add((self.loaded.base_dir / name).read_bytes(), name, collection)
        return self.temp, collection

    def _add(self, data: bytes, name: str, collection: str) -> None:
        assert self.temp is not None
        ingest.index_bytes(self.temp, data, name, self.cfg, collection=collection, name=name)

    def _configured(self) -> Index:
        if self.configured is None:
            path = Path(self.cfg.index_file)
            if not path.is_file():
                raise UsageError(f"chat.docs.index_file {path} does not exist: a `collection` case needs the configured index "
                                 "(fill it with `ernie-ops docs add`), or give the case its `passages`")  # fmt: skip
            self.configured = self.stack.enter_context(Index(path, tokenizer=self.cfg.tokenizer))
        return self.configured


def _down(exc: ChatError, target: Target) -> TargetDown:
    where = target.url or "the model"
    detail = exc.detail.removeprefix(f"{target.url}: ")
    return TargetDown(f"cannot reach {where}: {detail}; start the instance or check --port / gateway.url")


async def _messages_case(case: g.Case, defaults: g.Defaults, client: Client, target: Target) -> CaseResult:
    assert case.messages is not None
    messages = [m.model_dump() for m in case.messages]
    if defaults.system and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": defaults.system})
    try:
        async with contextlib.aclosing(client.stream(messages, defaults.max_tokens, TEMPERATURE)) as pieces:
            answer = "".join([p async for p in pieces])
    except ChatError as exc:
        if exc.kind == "down":
            raise _down(exc, target) from None
        return CaseResult(case.id, case.kind, case.weight, False, "", [f"no answer: {exc}"])
    failures = score.phrase_failures(answer, case.must_include, case.must_not_include, case.case_sensitive)
    return CaseResult(case.id, case.kind, case.weight, not failures, answer, failures)


async def _copy_case(case: g.Case, client: Client, target: Target) -> CaseResult:
    assert case.copy_ is not None
    cfg = target.marketing.model_copy(update={"temperature": TEMPERATURE})
    values = case.copy_.model_dump(exclude={"first_try"}, exclude_none=True)
    try:
        req = CopyRequest.from_form(values, cfg)
    except FormError as exc:  # e.g. a channel the configured chat.marketing does not allow
        return CaseResult(case.id, case.kind, case.weight, False, "", [f"request refused: {exc}"])

    async def complete(messages, max_tokens, temperature, stats=None, extra=None) -> str:
        async with contextlib.aclosing(client.stream(messages, max_tokens, temperature, stats, extra)) as pieces:
            return "".join([p async for p in pieces])

    try:
        posts = await CopyWriter(client, cfg, complete=complete).posts(req)
    except ChatError as exc:
        if exc.kind == "down":
            raise _down(exc, target) from None
        return CaseResult(case.id, case.kind, case.weight, False, "", [f"no answer: {exc}"])
    failures = []
    for i, post in enumerate(posts, 1):
        if not post.ok:
            failures.append(f"post {i}: {', '.join(post.flags)} after {post.attempts} tries")
        elif case.copy_.first_try and post.attempts > 1:
            failures.append(f"post {i}: within the rules only at try {post.attempts}")
        failures += [
            f"post {i}: {f}" for f in score.phrase_failures(post.text, case.must_include, case.must_not_include, case.case_sensitive)
        ]
    answer = "\n---\n".join(p.text for p in posts)
    return CaseResult(case.id, case.kind, case.weight, not failures, answer, failures)


class _Completer:
    """`complete` over the eval client's `stream`, the call `welcome_writer` makes of a GatewayClient."""

    def __init__(self, client: Client):
        self.client = client

    async def complete(self, messages, max_tokens, temperature, stats=None, extra=None) -> str:
        async with contextlib.aclosing(self.client.stream(messages, max_tokens, temperature, stats, extra)) as pieces:
            return "".join([p async for p in pieces])


def case_facts(case: g.Case, today: date) -> Facts:
    """The HR record of an `onboarding` case, its start date counted from `today`."""
    assert case.onboarding is not None
    o = case.onboarding
    start = today + timedelta(days=o.start_in_days)
    return Facts(o.employee or case.id, o.name, o.department, o.role, start, o.manager)


async def _onboarding_case(case: g.Case, client: Client, target: Target) -> CaseResult:
    cfg = target.onboarding
    facts = case_facts(case, date.today())
    write = welcome_writer(_Completer(client), onboarding_scenario().system_prompt, cfg.welcome_max_tokens,  # type: ignore[arg-type]
                           temperature=TEMPERATURE)  # fmt: skip
    try:
        text = await write(facts, WELCOME_RULES)
    except ChatError as exc:
        if exc.kind == "down":
            raise _down(exc, target) from None
        return CaseResult(case.id, case.kind, case.weight, False, "", [f"no answer: {exc}"])
    failures = []
    reason = refusal(text, build_plan(facts, cfg.templates), cfg.templates)
    if reason is not None:
        failures.append(f"fact check: {reason}")
    failures += score.phrase_failures(text, case.must_include, case.must_not_include, case.case_sensitive)
    return CaseResult(case.id, case.kind, case.weight, not failures, text, failures)


async def _docs_case(case: g.Case, defaults: g.Defaults, client: Client, counter: history.Counter, target: Target,
                     index: Index, collection: str) -> CaseResult:  # fmt: skip
    assert case.docs is not None
    chat = ChatConfig(max_tokens=defaults.max_tokens, temperature=TEMPERATURE, docs=target.docs)
    budget = history.Budget(target.max_model_len, chat.max_tokens, chat.margin_tokens)
    conv = Conversation(docs_scenario(), chat, budget, client, counter, user="eval", docs=CollectionDocs(index, target.docs, collection))  # type: ignore[arg-type]
    sink = QuietSink()
    out = await conv.on_user_message(case.docs.question, sink)
    if out.kind == "failed":
        if isinstance(out.error, ChatError) and out.error.kind == "down":
            raise _down(out.error, target)
        return CaseResult(case.id, case.kind, case.weight, False, "".join(sink.said), [f"no answer: {out.error}"])
    if out.kind == "unanswered":
        why = f"retrieval found no passage that answers it (chat.docs.min_coverage {target.docs.min_coverage}); the model was not asked"
        return CaseResult(case.id, case.kind, case.weight, False, "".join(sink.said), [why])
    answer = conv.history[-1]["content"]
    failures = score.phrase_failures(answer, case.must_include, case.must_not_include, case.case_sensitive)
    cited = list(out.cited or [])
    if case.docs.citations:
        failures += score.citation_failures(cited, [h.text for h in out.hits or []], case.must_include, case.case_sensitive)
    return CaseResult(case.id, case.kind, case.weight, not failures, answer, failures, cited=cited)


def evaluate(path: str | Path, target: Target) -> EvalReport:
    """Load the set at `path` and run it against `target`: GoldenSetError for a bad set, TargetDown when the model
    cannot be reached; otherwise the report (its `pass_rate` and `failing` cases are what a gate judges)."""
    loaded = g.load(path)
    return asyncio.run(_evaluate(loaded, target))


async def _evaluate(loaded: g.Loaded, target: Target) -> EvalReport:
    # read: the longest silence while a CPU engine works through a prompt; the whole reply bounded generously
    client = GatewayClient(target.url, target.model, Timeouts(connect=5.0, read=120.0, reply=600.0), api_key=target.api_key,
                           verify=target.verify)  # type: ignore[arg-type]  # fmt: skip
    try:
        counter = history.TokenizeCounter(client.http, target.url, target.model)
        return await run_cases(loaded, client, target=target, counter=counter)
    finally:
        await client.aclose()


def run_cases_sync(loaded: g.Loaded, target: Target) -> EvalReport:
    """An already loaded set against `target` (the CLI loads it first, to report a bad set before the config)."""
    return asyncio.run(_evaluate(loaded, target))
