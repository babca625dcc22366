"""A typed message of the onboarding profile, answered through the chat's Conversation: the prompt from the
onboarding service (the login's facts, the push log as it is now; outside the window the polite sentence instead,
an HR failure its friendly sentence), then the session's Conversation with that system prompt (history budget,
streaming, clean-up as for any reply). The prompt itself: `onboarding/answer.py`.
"""

from __future__ import annotations

import logging

from ernie_ops.chat.conversation import Conversation, Outcome, Sink
from ernie_ops.errors import ErnieOpsError
from ernie_ops.hr.model import HRError
from ernie_ops.onboarding.answer import UNAVAILABLE
from ernie_ops.onboarding.window import OnboardingOver

log = logging.getLogger("ernie_ops.onboarding.answer")  # the name it logged under before it moved here


async def answer(helper, login: str, text: str, conversation: Conversation, sink: Sink) -> Outcome:
    """A typed message of the onboarding profile: answered with the login's facts and plan (see the module
    docstring). `helper` is the service's Onboarding, or None when it could not be built."""
    if helper is None:
        await sink.fail(UNAVAILABLE)
        return Outcome("failed")
    try:
        system = await helper.question_prompt(login)
    except OnboardingOver as exc:
        log.info("onboarding %s: question after the window: %s", login, exc)
        await sink.say(exc.message)
        return Outcome("unanswered")
    except HRError as exc:
        log.warning("onboarding %s: question: %s", login, exc.detail)
        await sink.fail(exc.message)
        return Outcome("failed", error=exc)
    except ErnieOpsError as exc:
        log.error("onboarding %s: question: %s", login, exc)
        await sink.fail(UNAVAILABLE)
        return Outcome("failed", error=exc)
    return await conversation.on_user_message(text, sink, system=system)
