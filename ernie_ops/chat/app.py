"""The Chainlit hooks (loaded by `ernie-ops chat` through Chainlit's runner, never imported elsewhere).

Login: Chainlit password auth against the users file (scrypt hashes), chosen over header auth from
nginx because it needs nothing but the app and the file, and it works the same by hand. Chat
profiles are the scenarios; a session's `Conversation` lives in `cl.user_session` (memory only, as
in the article: a restart or a new chat starts fresh).
"""

from __future__ import annotations

import asyncio
import logging
import os

import chainlit as cl

from ernie_ops import config
from ernie_ops.chat import history, users
from ernie_ops.chat.client import GatewayClient, Timeouts
from ernie_ops.chat.conversation import Conversation
from ernie_ops.errors import ConfigError

log = logging.getLogger("ernie_ops.chat")
CFG = config.load()
CHAT = CFG.chat
SCENARIOS = {s.name: s for s in CHAT.effective_scenarios()}
DEFAULT = CHAT.default_scenario or next(iter(SCENARIOS))
BUDGET = history.Budget(CFG.vllm.max_model_len, CHAT.max_tokens, CHAT.margin_tokens)
CLIENT = GatewayClient(
    CFG.chat_gateway_url(),
    CFG.model.served_name,
    Timeouts(CHAT.connect_timeout_seconds, CHAT.read_timeout_seconds, CHAT.reply_timeout_seconds),
    api_key=os.environ.get("ERNIE_OPS_API_KEY") or None,
    extra_body=CHAT.extra_body,
)
COUNTER = history.TokenizeCounter(CLIENT.http, CLIENT.base_url, CFG.model.served_name, timeout=CHAT.connect_timeout_seconds * 2)
log.info("chat app: gateway %s, model %s, scenarios: %s", CLIENT.base_url, CFG.model.served_name, ", ".join(SCENARIOS))


@cl.password_auth_callback
async def login(username: str, password: str) -> cl.User | None:
    try:
        ok = await asyncio.to_thread(users.authenticate, CHAT.users_file, username, password)
    except ConfigError as exc:
        log.error("login %s refused: the users file is not usable: %s", username, exc)
        return None
    log.info("login %s: %s", username, "ok" if ok else "refused")
    return cl.User(identifier=username, metadata={"provider": "users-file"}) if ok else None


@cl.set_chat_profiles
async def profiles(user: cl.User | None = None, language: str | None = None) -> list[cl.ChatProfile]:
    return [
        cl.ChatProfile(
            name=s.name,
            markdown_description=s.description or s.name,
            default=s.name == DEFAULT,
            starters=[cl.Starter(label=text[:40], message=text) for text in s.starters] or None,
        )
        for s in SCENARIOS.values()
    ]


@cl.on_chat_start
async def start() -> None:
    name = cl.user_session.get("chat_profile") or DEFAULT
    user = cl.user_session.get("user")
    scenario = SCENARIOS.get(name, SCENARIOS[DEFAULT])
    conv = Conversation(scenario, CHAT, BUDGET, CLIENT, COUNTER, user=user.identifier if user else "-")
    cl.user_session.set("conversation", conv)


class MessageSink:
    """Tokens into one `cl.Message`; the cleaned text replaces them at the end."""

    def __init__(self) -> None:
        self.msg: cl.Message | None = None

    async def token(self, piece: str) -> None:
        if self.msg is None:
            self.msg = cl.Message(content="")
        await self.msg.stream_token(piece)

    async def finish(self, text: str, source: str | None) -> None:
        msg = self.msg or cl.Message(content="")
        msg.content = text
        if source:
            msg.elements = [cl.Text(name="原文 source", content=source, display="inline")]
        await msg.send()

    async def say(self, text: str) -> None:
        await cl.Message(content=text).send()

    async def fail(self, text: str) -> None:
        await cl.ErrorMessage(content=text).send()

    async def stopped(self) -> None:
        if self.msg is not None:
            await self.msg.update()  # ends the streaming state; the partial text stays


@cl.on_message
async def on_message(message: cl.Message) -> None:
    conv: Conversation | None = cl.user_session.get("conversation")
    if conv is None:  # a message before on_chat_start finished (reconnects): start now
        await start()
        conv = cl.user_session.get("conversation")
    await conv.on_user_message(message.content, MessageSink())


@cl.on_stop
async def stopped() -> None:
    conv: Conversation | None = cl.user_session.get("conversation")
    log.info("stop pressed by %s", conv.user if conv else "-")
