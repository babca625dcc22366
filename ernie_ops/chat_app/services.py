"""What the chat app's hooks share, built once from the config: the scenarios, the gateway client and its token
counter, the business tools, and the app-wide limits (uploads pending and read at once, logins, scrypt hashes).

One object instead of module globals, so app.py's hooks read `APP.x` and a reader sees in one place everything
a request may touch; `from_config` is the only place that decides what the app is made of.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ernie_ops.chat import history, upload_gate, users
from ernie_ops.chat.config import ChatConfig, ScenarioConfig
from ernie_ops.chat.login_guard import LoginGuard
from ernie_ops.chat_app.marketing_ui import CopyTool
from ernie_ops.chat_app.onboarding_ui import build_onboarding
from ernie_ops.client.gateway import GatewayClient
from ernie_ops.config import Config
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.embed import EmbeddingClient
from ernie_ops.threads.config import HistoryConfig

SCRYPT_AT_ONCE = 2  # scrypt hashes at once: 128 MiB each (users.py)


@dataclass
class ChatServices:
    cfg: Config
    scenarios: dict[str, ScenarioConfig]
    default: str  # the scenario of a chat without a profile, or with one no longer configured
    budget: history.Budget
    client: GatewayClient
    counter: history.TokenizeCounter
    embed: Callable | None  # the docs' embedding call when chat.docs.embeddings is on
    tools: dict  # scenario name -> its CopyTool / OnboardingTool (the form and cards instead of free chat)
    upgrades: Path  # users.py's record of upgraded password hashes, in the app's state dir
    reads: asyncio.Semaphore  # uploads read at once (each in its isolated child), across all users and the tools
    uploads: upload_gate.Pending = field(default_factory=upload_gate.Pending)  # files taken, not yet kept or dropped
    logins: LoginGuard = field(default_factory=LoginGuard)
    hashing: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SCRYPT_AT_ONCE))
    background: list[asyncio.Task] = field(default_factory=list)  # retention and the uploads' sweep (cancelled at shutdown)

    @property
    def chat(self) -> ChatConfig:
        return self.cfg.chat

    @property
    def docs(self) -> DocsConfig:
        return self.cfg.chat.docs

    @property
    def history(self) -> HistoryConfig:
        return self.cfg.chat.history

    def scenario(self, profile: str | None) -> ScenarioConfig:
        """The scenario of a chat profile's name; the default one for none or a name no longer configured."""
        return self.scenarios.get(profile or self.default, self.scenarios[self.default])

    @classmethod
    def from_config(cls, cfg: Config, env: Mapping[str, str], name_thread: Callable[[str], Awaitable[None]]) -> ChatServices:
        """`env`: the gateway's and the embeddings' API keys, and CHAINLIT_APP_ROOT (the state dir, server.py sets it).
        `name_thread`: how the marketing tool names its thread (Chainlit's data layer, with history only)."""
        chat = cfg.chat
        scenarios = {s.name: s for s in chat.effective_scenarios()}
        client = GatewayClient.from_config(cfg, env)
        embed = None
        if chat.docs.embeddings.enabled:
            key = env.get("ERNIE_OPS_EMBEDDINGS_API_KEY") or None
            embed = EmbeddingClient.from_config(chat.docs.embeddings, api_key=key).embed_sync
        reads = asyncio.Semaphore(chat.file_reads_at_once)
        tools: dict = {}
        for s in scenarios.values():
            if s.tool == "copy":
                tools[s.name] = CopyTool(chat.marketing, client, s.system_prompt, name_thread=name_thread, reads=reads)
            elif s.tool == "onboarding":
                tools[s.name] = build_onboarding(chat.onboarding, client, s.system_prompt)
        return cls(
            cfg=cfg,
            scenarios=scenarios,
            default=chat.default_scenario or next(iter(scenarios)),
            budget=history.Budget(cfg.vllm.max_model_len, chat.max_tokens, chat.margin_tokens),
            client=client,
            counter=history.TokenizeCounter(client.http, client.base_url, cfg.model.served_name, timeout=chat.connect_timeout_seconds * 2),
            embed=embed,
            tools=tools,
            upgrades=Path(env.get("CHAINLIT_APP_ROOT", ".")) / users.UPGRADES_NAME,
            reads=reads,
        )
