"""Chainlit's thread, step and element dicts from what the thread store keeps, and back (no Chainlit here).

The store keeps Chainlit's StepDict / ElementDict whole as JSON (`ernie_ops.threads`); this module adds
what Chainlit's routes and the browser expect around them: the ThreadDict of the sidebar (dates as ISO
strings, the author's login name in `userIdentifier`, which Chainlit compares with the logged-in user
before it opens or resumes a thread), the feedback of a rated reply on its step, and a `url` for every
element whose bytes the store holds (a session's file key dies with the session: a resumed thread's
sources and uploads are fetched from the app's element route instead). Also: the model's view of a stored
thread (`conversation_messages`) for the history budget, and the once-per-session "not saved" notice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

NOT_SAVED = "对话记录暂时无法保存，聊天仍可继续。 / History is not being saved right now; the chat still answers."
ELEMENT_ROUTE = "/history/element"  # app.py serves the stored bytes there, to the thread's author only
ORDER_KEY = "orderNs"  # added to a stored element when first saved: the store lists elements by id, not by time


def iso(when: datetime | str | None) -> str | None:
    """Chainlit's dates: ISO 8601 strings (the store gives timezone-aware datetimes)."""
    if when is None or isinstance(when, str):
        return when
    return when.isoformat()


def element_url(root_path: str, thread_id: str, element_id: str) -> str:
    return f"{root_path.rstrip('/')}{ELEMENT_ROUTE}/{quote(thread_id, safe='')}/{quote(element_id, safe='')}"


def with_url(element: Mapping[str, Any], root_path: str) -> dict:
    """A stored element as the browser fetches it: our route instead of a dead session file key.
    An element that came with its own `url` (hosted elsewhere) keeps it."""
    out = dict(element)
    if not out.get("url") and out.get("threadId") and out.get("id"):
        out["url"] = element_url(root_path, str(out["threadId"]), str(out["id"]))
        out["chainlitKey"] = None
    return out


ACTIVE = ("html", "xml", "svg", "javascript", "ecmascript", "xhtml")  # a browser would run these from our origin


def served_as(mime: str | None) -> tuple[str, str]:
    """(Content-Type, Content-Disposition) for a stored element's bytes: what a page could run (an uploaded
    .html or .svg) goes out as a download, never rendered from the app's origin."""
    if not mime or any(word in mime.lower() for word in ACTIVE):
        return "application/octet-stream", "attachment"
    return mime, "inline"


def thread_summary(row: Any) -> dict:
    """A ThreadDict for the sidebar's list (no steps: Chainlit fetches them when the thread is opened)."""
    return {
        "id": row.id,
        "createdAt": iso(row.created_at),
        "name": row.name,
        "userId": row.user,  # the login name: it is also the user's id towards Chainlit (see data_layer)
        "userIdentifier": row.user,
        "tags": list(row.tags or []),
        "metadata": dict(row.metadata or {}),
        "steps": [],
        "elements": [],
    }


def thread_dict(row: Any, steps: Iterable[Mapping], elements: Iterable[Mapping], root_path: str = "") -> dict:
    """The whole ThreadDict of an opened or resumed thread."""
    out = thread_summary(row)
    out["steps"] = [dict(s) for s in steps]
    ordered = sorted(elements, key=lambda e: e.get(ORDER_KEY) or 0)  # as they were sent (a message's cards in order)
    out["elements"] = [with_url(e, root_path) for e in ordered]
    return out


def feedback_dict(feedback_id: str, step_id: str, value: int, comment: str | None) -> dict:
    """What Chainlit's page reads from a rated step's `feedback` to show the thumb it was given."""
    return {"id": feedback_id, "forId": step_id, "value": value, "comment": comment}


def step_for_store(step: Mapping[str, Any]) -> dict:
    """A StepDict as the store keeps it: Chainlit's keys as they are, minus nothing but None-only noise
    (update_step sends the whole dict again; a key it leaves out keeps its stored value)."""
    return {k: v for k, v in step.items() if v is not None or k in ("parentId",)}


def element_for_store(element: Mapping[str, Any]) -> dict:
    """An ElementDict without what only the live session knows (its file key, a local path)."""
    return {k: v for k, v in element.items() if k not in ("chainlitKey", "path")}


def element_bytes(content: bytes | str | None, path: str | None) -> bytes | None:
    """The element's bytes: its content (a str is UTF-8, e.g. a source passage) or the file at its path."""
    if isinstance(content, bytes | bytearray):
        return bytes(content)
    if isinstance(content, str):
        return content.encode("utf-8")
    if path:
        with open(path, "rb") as f:
            return f.read()
    return None


def conversation_messages(steps: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The model's view of a stored thread: user and assistant messages in order (what `Conversation.restore`
    takes). Error messages, tool steps (indexing) and empty messages are left out: the model never saw them."""
    out: list[dict[str, str]] = []
    for s in steps:
        kind = s.get("type")
        text = s.get("output") or ""
        if s.get("isError") or not text.strip():
            continue
        if kind == "user_message":
            out.append({"role": "user", "content": text})
        elif kind == "assistant_message":
            out.append({"role": "assistant", "content": text})
    return out


def sources_shown(elements: Iterable[Mapping[str, Any]]) -> int:
    """The highest passage number (【n】) a thread has shown: a resumed Docs conversation numbers on from it
    (Chainlit opens every element of a thread that bears the clicked name)."""
    numbers = [int(m.group(1)) for e in elements if (m := re.fullmatch(r"【(\d+)】", str(e.get("name") or "")))]
    return max(numbers, default=0)


class SaveNotice:
    """Tells each chat session once that history is not being saved (the database is down or full)."""

    def __init__(self, text: str = NOT_SAVED) -> None:
        self.text = text
        self._told: set[str] = set()

    def first(self, session_id: str | None) -> str | None:
        """The sentence to show this session now, or None (told already, or no session to tell)."""
        if session_id is None or session_id in self._told:
            return None
        self._told.add(session_id)
        return self.text

    def forget(self, session_id: str) -> None:
        self._told.discard(session_id)
