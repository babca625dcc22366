"""Chainlit's data layer over the project's thread store: thread list, resume, rename, delete, feedback.

Why our own `BaseDataLayer` and not Chainlit's `SQLAlchemyDataLayer`: that one needs its tables created by
hand (no migrations); its SQL is static text written for PostgreSQL (Chainlit/chainlit#2288; a MySQL user
found it "not working", #2232); its JSON columns misbehaved on SQLite (fix proposed in #1817, closed
unmerged); and it dropped its foreign keys because Chainlit may save a step before its thread (#836).
The store (`ernie_ops.threads`) owns a versioned schema, migrated at start, and keeps Chainlit's dicts
whole as JSON, so a Chainlit upgrade that adds a key changes no table.

Ownership: Chainlit asks `get_thread_author` before it opens, renames, deletes or serves an element of a
thread (chainlit/data/acl.py) and compares the thread's `userIdentifier` with the logged-in user before a
websocket may resume it (socket.py's connect and resume_thread); `list_threads` is given the logged-in
user's id by the route. A user's id towards Chainlit is their login name (unique in the users file), so
a thread's author is the same string everywhere.

Database down or full: every call that writes catches `HistoryUnavailable`, logs it, and the chat goes on;
the user of that session is told once (`SaveNotice`, a toast). What was not written is not caught up
later; writes are upserts, so nothing is written twice when the database returns. A database that hangs
(a frozen server, a black-holed address) delays one call by its timeout: the store's breaker then fails the
next calls at once for 30 s (ernie_ops/threads/breaker.py), so the replies Chainlit saves around go out on time. Reads: a thread that
cannot be read is "not found" (the chat then starts fresh); the author of a thread that cannot be read is
an error, so nothing is opened that was not checked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from chainlit.data.base import BaseDataLayer
from chainlit.data.utils import queue_until_user_message
from chainlit.types import Feedback, PageInfo, PaginatedResponse, Pagination, ThreadDict, ThreadFilter
from chainlit.user import PersistedUser, User
from fastapi import HTTPException

from ernie_ops.chat import thread_dicts
from ernie_ops.chat.drain import REPLIES
from ernie_ops.threads.errors import HistoryError, HistoryUnavailable
from ernie_ops.threads.store import ThreadStore

log = logging.getLogger("ernie_ops.chat")


def _session() -> Any:
    """The chat session this call runs for, if any (an HTTP route without a socket has none)."""
    try:
        from chainlit.context import context

        return context.session
    except Exception:  # no context: a plain HTTP request
        return None


ORDER_ATTR = "_ernie_order"  # on a Chainlit element object: when it was first sent (see create_element)


def is_browser_upload(element) -> bool:
    """A file the browser attached to a user's message: Chainlit gives it the id of the uploaded file as its own
    (emitter.process_message); a file the app sends gets a fresh id, its upload key another one."""
    key = getattr(element, "chainlit_key", None)
    return bool(key) and key == getattr(element, "id", None)


def _persisted(row) -> PersistedUser:
    """Chainlit's user: its id is the login name (the store's own row id stays inside the store)."""
    return PersistedUser(id=row.identifier, identifier=row.identifier, createdAt=thread_dicts.iso(row.created_at), metadata=row.metadata)


def _unsaved(identifier: str) -> PersistedUser:
    """The logged-in user while the database is down: the same id (the login name) it will have when it is back."""
    return PersistedUser(id=identifier, identifier=identifier, createdAt=thread_dicts.iso(datetime.now(UTC)), metadata={})


def _refused(exc: HistoryUnavailable) -> HTTPException:
    """A route that must not go on unchecked (whose thread is this?): 503 with the reason, not a traceback."""
    log.error("history: %s", exc)
    return HTTPException(status_code=503, detail=f"chat history unavailable: {exc}")


class HistoryLayer(BaseDataLayer):
    """Thin: each Chainlit call is one store call; the dict shapes are `thread_dicts`'s."""

    def __init__(self, opener: Callable[[], Awaitable[ThreadStore]], root_path: str = "", notice=None,
                 on_deleted: Callable[[str, str], Awaitable[Any]] | None = None,
                 action_titles: Mapping[str, str] | None = None):  # fmt: skip
        """`on_deleted(user, thread_id)`: after a thread is deleted (the app drops its uploads' passages).
        `action_titles`: a readable title per action name. Chainlit names a thread after its first interaction, which
        for a thread begun with a button is the action's name ("copy_generate"); such a thread gets the title, if it
        has no name yet, and `name_thread` may replace it with a specific one."""
        self._opener, self.root_path, self.on_deleted = opener, root_path, on_deleted
        self.action_titles = dict(action_titles or {})
        self._store: ThreadStore | None = None
        self._lock = asyncio.Lock()
        self._owned: set[tuple[str, str]] = set()  # (user, thread) this process has seen the user may write
        self._order = 0  # elements' order of creation (strictly increasing, ns): the store returns them by id
        self._held: dict[str, Any] = {}  # element id -> a browser upload the app has not accepted yet
        self._decided: dict[str, bool] = {}  # element id -> the app's word, given before Chainlit sent the element
        self.notice = notice or thread_dicts.SaveNotice()

    async def store(self) -> ThreadStore:
        """Opened at first use, in the server's event loop (Chainlit builds the layer from sync code);
        a store that could not be opened is tried again at the next call."""
        if self._store is None:
            async with self._lock:
                if self._store is None:
                    self._store = await self._opener()
        return self._store

    async def _write(self, what: str, call: Callable[[ThreadStore], Awaitable[Any]], thread_id: str | None = None) -> Any:
        try:
            async with REPLIES.writing():  # a stop of the app waits for it (chat/drain.py)
                store = await self.store()
                if thread_id and not await self._may_write(store, thread_id):
                    log.warning("history: %s not saved: thread %s belongs to another user than this session's", what, thread_id)
                    return None
                return await call(store)
        except HistoryUnavailable as exc:
            log.error("history: %s not saved: %s", what, exc)
            await self._tell_once()
        except HistoryError as exc:  # e.g. feedback on a message written while the database was down
            log.warning("history: %s not saved: %s", what, exc)
        return None

    async def _may_write(self, store: ThreadStore, thread_id: str) -> bool:
        """A chat session writes only into its user's threads (or a new one). Chainlit checks the owner when a
        socket asks to resume a thread, but lets it in when the thread cannot be read then (database down):
        checked again here, once per session user and thread."""
        user = getattr(getattr(_session(), "user", None), "identifier", None)
        if user is None or (user, thread_id) in self._owned:  # no session: an HTTP route, which checked already
            return True
        owner = await store.thread_user(thread_id)
        if owner is not None and owner != user:
            return False
        self._owned.add((user, thread_id))
        return True

    async def _tell_once(self) -> None:
        session = _session()
        text = self.notice.first(getattr(session, "id", None))
        if text is None:
            return
        try:
            from chainlit.context import context

            await context.emitter.send_toast(text, "warning")
        except Exception as exc:  # the chat goes on; the log has the cause already
            log.warning("history: could not tell the user that history is not saved: %s", exc)

    # -- users --------------------------------------------------------------------------------------
    async def get_user(self, identifier: str) -> PersistedUser | None:
        try:
            row = await (await self.store()).get_user(identifier)
        except HistoryUnavailable as exc:  # logged in all the same (the users file said so), without history
            log.error("history: user %s cannot be read: %s", identifier, exc)
            return _unsaved(identifier)
        return _persisted(row) if row is not None else None

    async def create_user(self, user: User) -> PersistedUser | None:
        try:
            return _persisted(await (await self.store()).upsert_user(user.identifier, dict(user.metadata or {})))
        except HistoryUnavailable as exc:
            log.error("history: user %s not saved: %s", user.identifier, exc)
            return _unsaved(user.identifier)

    # -- feedback -----------------------------------------------------------------------------------
    async def upsert_feedback(self, feedback: Feedback) -> str:
        async def run(s: ThreadStore) -> str:
            value, comment = int(feedback.value), feedback.comment
            # one feedback per reply, named after it: its removal (which Chainlit sends by feedback id) finds the step
            fid = await s.upsert_feedback(feedback_id=feedback.id or feedback.forId, step_id=feedback.forId, value=value, comment=comment)
            # on the step too: a resumed thread shows the thumb it was given (Chainlit reads the step's `feedback`)
            await s.upsert_step({"id": feedback.forId, "feedback": thread_dicts.feedback_dict(fid, feedback.forId, value, comment)})
            return fid

        fid = await self._write("feedback", run)
        return fid or feedback.id or ""

    async def step_author(self, thread_id: str, step_id: str) -> str | None:
        """The owner of `thread_id` if `step_id` is one of its messages, else None (a feedback's check)."""
        try:
            store = await self.store()
            owner = await store.thread_user(thread_id)
            return owner if owner and any(st.get("id") == step_id for st in await store.steps(thread_id)) else None
        except HistoryUnavailable as exc:
            raise _refused(exc) from None

    async def feedback_author(self, feedback_id: str) -> str | None:
        """The owner of the thread whose message a feedback rates (None: no such feedback): who may remove or change it."""
        try:
            store = await self.store()
            thread_id = await store.thread_of("feedback", feedback_id)
            return await store.thread_user(thread_id) if thread_id else None
        except HistoryUnavailable as exc:
            raise _refused(exc) from None

    async def delete_feedback(self, feedback_id: str) -> bool:
        async def run(s: ThreadStore) -> bool:
            if not await s.delete_feedback(feedback_id):
                return False
            await s.upsert_step({"id": feedback_id, "feedback": None})  # the thumb taken back (id = the step's)
            return True

        return bool(await self._write("a feedback's removal", run))

    # -- elements -----------------------------------------------------------------------------------
    async def create_element(self, element) -> None:
        """Stamped with its order when Chainlit first sends it (on the element object, so an update of it keeps the
        stamp), before the first-message queue: queued creates run later, possibly after an update of the same card.
        A file the browser attached to a message waits for the app's word (`settle_uploads`): only an accepted
        one is stored (issue 34: a refused or unread file never reaches the database)."""
        order = element.__dict__.setdefault(ORDER_ATTR, self._next_order())
        if is_browser_upload(element):
            decided = self._decided.pop(element.id, None)  # Chainlit sends the elements in a task of their own: either order
            if decided is None:
                self._held[element.id] = element
            if not decided:
                return
        await self._save_element(element, order)

    async def settle_uploads(self, kept: list[str], dropped: list[str]) -> None:
        """The app's word on the files a message brought (element ids): store the kept ones, forget the dropped."""
        for element_id in dropped:
            if self._held.pop(element_id, None) is None:
                self._decided[element_id] = False
        for element_id in kept:
            element = self._held.pop(element_id, None)
            if element is None:
                self._decided[element_id] = True
            else:
                await self._save_element(element, element.__dict__[ORDER_ATTR])

    def forget_uploads(self, element_ids: list[str]) -> None:
        """A session ended: what it held or was told about goes (its files left with its directory)."""
        for element_id in element_ids:
            self._held.pop(element_id, None)
            self._decided.pop(element_id, None)

    @queue_until_user_message()
    async def _save_element(self, element, order: int) -> None:
        try:
            content = await asyncio.to_thread(thread_dicts.element_bytes, element.content, element.path)
        except OSError as exc:
            log.error("history: the file of element %s (%s) cannot be read: %s", element.id, element.name, exc)
            content = None
        data = thread_dicts.element_for_store(element.to_dict())

        async def run(s: ThreadStore) -> None:
            if await s.get_element(element.thread_id, element.id) is None:  # an update keeps its place
                data[thread_dicts.ORDER_KEY] = order
            await s.upsert_element(data, content)

        await self._write(f"element {element.name}", run, element.thread_id)

    def _next_order(self) -> int:
        self._order = max(self._order + 1, time.time_ns())
        return self._order

    async def get_element(self, thread_id: str, element_id: str) -> dict | None:
        found = await (await self.store()).get_element(thread_id, element_id)
        return thread_dicts.with_url(found, self.root_path) if found else None

    @queue_until_user_message()
    async def delete_element(self, element_id: str, thread_id: str | None = None) -> None:
        """Only from the element's own thread, and only by its owner's session (an id copied from another user's link
        deletes nothing)."""
        stored = await self._thread_of("element", element_id)
        if stored is None or (thread_id is not None and thread_id != stored):
            return
        await self._write("an element's removal", lambda s: s.delete_element(element_id, stored), stored)

    async def _thread_of(self, kind: str, item_id: str) -> str | None:
        try:
            return await (await self.store()).thread_of(kind, item_id)
        except HistoryUnavailable as exc:
            log.error("history: the removal of %s %s not saved: %s", kind, item_id, exc)
            return None

    async def element_content(self, thread_id: str, element_id: str) -> bytes | None:
        return await (await self.store()).element_content(thread_id, element_id)

    # -- steps --------------------------------------------------------------------------------------
    @queue_until_user_message()
    async def create_step(self, step_dict) -> None:
        data = thread_dicts.step_for_store(step_dict)
        await self._write("a message", lambda s: s.upsert_step(data), data.get("threadId"))

    @queue_until_user_message()
    async def update_step(self, step_dict) -> None:
        data = thread_dicts.step_for_store(step_dict)
        await self._write("a message", lambda s: s.upsert_step(data), data.get("threadId"))

    @queue_until_user_message()
    async def delete_step(self, step_id: str) -> None:
        stored = await self._thread_of("step", step_id)
        if stored is not None:
            await self._write("a message's removal", lambda s: s.delete_step(step_id), stored)

    async def get_favorite_steps(self, user_id: str) -> list:
        return []  # favorites are off (server.py's config.toml)

    # -- threads ------------------------------------------------------------------------------------
    async def get_thread_author(self, thread_id: str) -> str:
        try:
            return await (await self.store()).thread_user(thread_id) or ""
        except HistoryUnavailable as exc:
            raise _refused(exc) from None

    async def delete_thread(self, thread_id: str) -> None:
        try:
            store = await self.store()
            user = await store.thread_user(thread_id)
            await store.delete_thread(thread_id)
        except HistoryUnavailable as exc:
            raise _refused(exc) from None
        if user and self.on_deleted is not None:
            await self.on_deleted(user, thread_id)

    async def list_threads(self, pagination: Pagination, filters: ThreadFilter) -> PaginatedResponse[ThreadDict]:
        if not filters.userId:  # the route always sets it; without it nobody's threads are listed
            return PaginatedResponse(pageInfo=PageInfo(hasNextPage=False, startCursor=None, endCursor=None), data=[])
        try:
            store = await self.store()
            rows, cursor = await store.list_threads(filters.userId, search=filters.search, limit=pagination.first, cursor=pagination.cursor)
        except HistoryUnavailable as exc:  # an empty sidebar; the chat itself goes on
            log.error("history: threads of %s cannot be listed: %s", filters.userId, exc)
            rows, cursor = [], None
        data = [thread_dicts.thread_summary(r) for r in rows]
        info = PageInfo(hasNextPage=cursor is not None, startCursor=data[0]["id"] if data else None, endCursor=cursor)
        return PaginatedResponse(pageInfo=info, data=data)

    async def get_thread(self, thread_id: str) -> ThreadDict | None:
        try:
            store = await self.store()
            row = await store.get_thread(thread_id)
            if row is None:
                return None
            steps, elements = await store.steps(thread_id), await store.elements(thread_id)
        except HistoryUnavailable as exc:
            log.error("history: thread %s cannot be read: %s", thread_id, exc)
            return None
        return thread_dicts.thread_dict(row, steps, elements, self.root_path)  # type: ignore[return-value]

    async def update_thread(self, thread_id: str, name: str | None = None, user_id: str | None = None,
                            metadata: dict | None = None, tags: list[str] | None = None) -> None:  # fmt: skip
        if user_id is None:  # the database was down at login: the session's user is not a persisted one
            user_id = getattr(getattr(_session(), "user", None), "identifier", None)
        title = self.action_titles.get(name) if name is not None else None

        async def run(s: ThreadStore) -> None:
            await s.upsert_thread(thread_id, user=user_id, name=None if title else name, metadata=metadata, tags=tags)
            if title:  # begun with a button: its title, unless the thread has a name already
                await s.name_thread(thread_id, title)

        await self._write("the thread", run, thread_id)

    async def name_thread(self, thread_id: str, name: str) -> None:
        """A specific name for a thread whose name is still a generic title (or none): a name the user gave stays."""
        user = getattr(getattr(_session(), "user", None), "identifier", None)
        generic = set(self.action_titles.values()) | set(self.action_titles)
        await self._write("the thread's name", lambda s: s.name_thread(thread_id, name, user=user, replacing=generic), thread_id)

    async def build_debug_url(self) -> str:
        return ""

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None
