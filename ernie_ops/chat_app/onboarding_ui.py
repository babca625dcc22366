"""The onboarding helper in the chat (新员工入职助手, Chainlit side).

Loaded by app.py only. The work is in `onboarding.service`: who the logged-in user is in the HR
system, their plan, the push log. Here: when the chat starts, the employee's items as OnboardingItem
cards (elements/OnboardingItem.jsx); the 确认 button calls the `onboarding_confirm` action, which
confirms for the LOGGED-IN user (the browser sends only an item id) and updates that card. A typed
question is answered with the employee's facts and plan in the prompt (`ask`, chat/onboarding_answer.py).

A reload, a reconnect or a second login starts a new chat: `open` reads the push log, pushes nothing
new, and the cards show what is stored, confirmed ones as 已确认. An HR problem is one friendly sentence
(the detail goes to the journal); nothing is pushed then.
"""

from __future__ import annotations

import logging
import os

import chainlit as cl

from ernie_ops.chat.onboarding_answer import answer
from ernie_ops.chat_app.marketing_ui import send_in_order
from ernie_ops.client.gateway import GatewayClient
from ernie_ops.errors import ErnieOpsError
from ernie_ops.hr.model import HRError
from ernie_ops.onboarding.answer import UNAVAILABLE
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import zh_date
from ernie_ops.onboarding.pushlog import PushLog
from ernie_ops.onboarding.service import Onboarding, card, connector_for, finder, welcome_writer
from ernie_ops.onboarding.window import OnboardingOver

log = logging.getLogger("ernie_ops.chat")
UNKNOWN_ITEM = "找不到这一项，请刷新页面。 / This item is not yours or no longer exists; reload the page."
ITEMS = "onboarding_items"
KIND_ORDER = {"welcome": 0, "task": 1, "guide": 2}


def build_onboarding(cfg: OnboardingConfig, client: GatewayClient, system_prompt: str) -> OnboardingTool:
    """The tool with its HR connector, push log and welcome writer; one that cannot be built still
    answers (UNAVAILABLE) and the journal says why, so the app serves its other scenarios."""
    try:
        connector = connector_for(cfg.hr, os.environ)
        push_log = PushLog(cfg.push_log)
    except ErnieOpsError as exc:
        log.error("onboarding: not available: %s", exc)
        return OnboardingTool(None)
    for warning in push_log.warnings:
        log.warning("onboarding: %s", warning)
    find = finder(connector, cfg.hr.lookup)
    return OnboardingTool(Onboarding(cfg, find, push_log, welcome_writer(client, system_prompt, cfg.welcome_max_tokens)))


class OnboardingTool:
    def __init__(self, service: Onboarding | None):
        self.service = service  # None: it could not be built (the journal says why, at start)

    async def start(self, login: str) -> list[cl.Message]:
        """The employee's item cards; returns the messages it sent (app.py shows them again if Chainlit moves the
        session to another socket)."""
        if self.service is None:
            return [await _sent(cl.ErrorMessage(content=UNAVAILABLE))]
        try:
            opened = await self.service.open(login)
        except OnboardingOver as exc:
            log.info("onboarding %s: %s", login, exc)
            return [await _sent(cl.Message(content=exc.message))]
        except HRError as exc:
            log.warning("onboarding %s: %s", login, exc.detail)
            return [await _sent(cl.ErrorMessage(content=exc.message))]
        except ErnieOpsError as exc:
            log.error("onboarding %s: %s", login, exc)
            return [await _sent(cl.ErrorMessage(content=UNAVAILABLE))]
        items = sorted(opened.items, key=lambda i: KIND_ORDER.get(i.kind, len(KIND_ORDER)))  # stable: push order within a kind
        elements = {i.item_id: cl.CustomElement(name="OnboardingItem", props=card(i), display="inline") for i in items}
        cl.user_session.set(ITEMS, elements)
        done = sum(1 for i in opened.items if i.confirmed)
        facts = opened.facts
        log.info(
            "onboarding %s: %d item(s), %d new, %d confirmed%s", login, len(opened.items), opened.new, done,
            ", fallback welcome" if opened.fallback_welcome_used else "",
        )  # fmt: skip
        content = (
            f"**{facts.name}**，你好！部门：{facts.department}，岗位：{facts.role or '-'}，入职日期：{zh_date(facts.start_date)}。"
            f"\n\n下面是你的入职事项（已确认 {done}/{len(items)}），看完请逐条点「确认」。"
            " / Your onboarding items: confirm each once you have read it."
        )
        return [await send_in_order(content, list(elements.values()))]

    def resume(self, stored: list[dict]) -> int:
        """A resumed thread's item cards (its stored elements, their props as last updated) become this
        session's again, so their 确认 buttons work; nothing is pushed or sent anew. Returns the cards found."""
        elements = {}
        for e in stored:
            props = e.get("props") or {}
            if e.get("name") == "OnboardingItem" and props.get("item_id"):
                elements[str(props["item_id"])] = cl.CustomElement(
                    id=e["id"], name="OnboardingItem", props=props, display=e.get("display") or "inline",
                    for_id=e.get("forId"), thread_id=e.get("threadId"),
                )  # fmt: skip
        cl.user_session.set(ITEMS, elements)
        return len(elements)

    async def confirm(self, login: str, payload: dict) -> None:
        elements: dict = cl.user_session.get(ITEMS) or {}
        item_id = str(payload.get("item_id") or "")
        element = elements.get(item_id)
        if self.service is None or element is None:
            await cl.ErrorMessage(content=UNKNOWN_ITEM).send()
            return
        try:
            item = await self.service.confirm(login, item_id)
        except OnboardingOver as exc:  # the window closed while the page was open
            log.info("onboarding %s: confirming %s: %s", login, item_id, exc)
            element.props = {**element.props, "error": exc.message}
            await element.update()
            return
        except HRError as exc:
            log.warning("onboarding %s: confirming %s: %s", login, item_id, exc.detail)
            element.props = {**element.props, "error": exc.message}
            await element.update()
            return
        except ErnieOpsError as exc:
            log.error("onboarding %s: confirming %s failed: %s", login, item_id, exc)
            element.props = {**element.props, "error": UNAVAILABLE}
            await element.update()
            return
        log.info("onboarding %s: %s confirmed", login, item_id)
        element.props = card(item)
        await element.update()

    async def ask(self, login: str, text: str, conversation, sink) -> None:
        """A typed message: answered with the login's facts and plan (never free chat without them)."""
        await answer(self.service, login, text, conversation, sink)


async def _sent(msg: cl.Message) -> cl.Message:
    await msg.send()
    return msg
