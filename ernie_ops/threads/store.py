"""`ThreadStore`: every read and write of the chat history, async, over SQLite or PostgreSQL.

The Chainlit adapter, the CLI and retention call it; it knows nothing of Chainlit beyond the keys of the
dicts it is given (StepDict: id, threadId, createdAt, type...; ElementDict: id, threadId, forId...), which it
keeps whole. Writes are upserts: the same step saved twice is one row, a partial update merges into what is
stored, so a write repeated after the database comes back duplicates nothing. Every write touches the
thread's `updated_at` (its last activity: the thread list's order and retention's clock).

A database that cannot be reached or refuses a statement raises `HistoryUnavailable` (one sentence),
never a raw SQLAlchemy or driver error. After such a failure the store's breaker (breaker.py) makes every call
fail at once for `breaker.OPEN_SECONDS`, then lets one call try the database: a server that hangs costs one
call its timeout, not every call.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import sqlite3
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ernie_ops.threads import database, schema
from ernie_ops.threads.breaker import Breaker
from ernie_ops.threads.errors import HistoryError, HistorySchemaError, HistoryUnavailable

__all__ = ["FeedbackRow", "HistoryError", "HistorySchemaError", "HistoryUnavailable", "ThreadRow", "ThreadStore", "UserRow", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class UserRow:
    id: str
    identifier: str
    created_at: datetime
    metadata: dict


@dataclass(frozen=True)
class ThreadRow:
    id: str
    user: str | None
    name: str | None
    created_at: datetime
    updated_at: datetime
    metadata: dict = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FeedbackRow:
    """One feedback with what an operator needs to judge it: who, the rated step (the answer), the user's
    message before it (the question), and the elements shown with the answer (the sources, for Docs)."""

    id: str
    created_at: datetime
    updated_at: datetime
    user: str | None
    thread_id: str
    thread_name: str | None
    step_id: str
    value: int
    comment: str | None
    step: dict | None
    question: dict | None
    elements: list[dict] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # element id -> the text shown (text elements: a source's passage)


TEXT_PREVIEW_CHARS = 2000


def _text(content: bytes) -> str:
    return content[: TEXT_PREVIEW_CHARS * 4].decode("utf-8", errors="replace")[:TEXT_PREVIEW_CHARS]


def _guarded(doing: str):
    """Turn a database or connection failure inside the method into HistoryUnavailable saying what failed, and
    keep the store's breaker: while it is open the method is not run and fails at once (breaker.py)."""

    def wrap(method):
        @functools.wraps(method)
        async def guarded(self: ThreadStore, *args, **kwargs):
            trial = self.breaker.enter(lambda why: f"the chat history database {self.where} could not {doing}: {why}")
            try:
                result = await method(self, *args, **kwargs)
            except (SQLAlchemyError, sqlite3.Error, OSError, TimeoutError) as exc:
                self.breaker.failed(f"could not {doing}: {_reason(exc)}")
                raise HistoryUnavailable(f"the chat history database {self.where} could not {doing}: {_reason(exc)}") from exc
            except BaseException:  # HistoryError (the database answered, or was not asked), a cancellation
                self.breaker.leave(trial)
                raise
            self.breaker.succeeded()
            return result

        return guarded

    return wrap


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _created(step: dict) -> str:
    """The step's createdAt as the text it is ordered by ('' when missing: first)."""
    value = step.get("createdAt")
    return str(value)[:64] if value else ""


def _like_literal(text: str) -> str:
    """`text` matched as itself in a LIKE pattern with escape '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _like(text: str) -> str:
    return "%" + _like_literal(text.lower()) + "%"


def _encode_cursor(row: ThreadRow) -> str:
    return base64.urlsafe_b64encode(f"{row.updated_at.isoformat()}|{row.id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        stamp, _, thread_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        when = datetime.fromisoformat(stamp)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise HistoryError(f"'{cursor}' is not a thread list cursor this store gave out") from None
    if when.tzinfo is None or not thread_id:
        raise HistoryError(f"'{cursor}' is not a thread list cursor this store gave out")
    return when, thread_id


def _thread_row(r) -> ThreadRow:
    return ThreadRow(r.id, r.user_identifier, r.name, r.created_at, r.updated_at, dict(r.metadata or {}), list(r.tags or []))


class ThreadStore:
    """The history over one engine; `open` creates or migrates the schema first."""

    def __init__(self, engine: AsyncEngine, url: str, now: Callable[[], datetime] = utc_now, breaker: Breaker | None = None):
        """`breaker`: shared by the stores opened one after another for one database (the chat app's, so that
        opening again fails at once too); a new one by default."""
        self.engine = engine
        self.breaker = breaker or Breaker()
        self.reader = engine.execution_options(**{database.READ_ONLY: True})  # same pool; reads wait for no writer
        self.where = database.shown(url)
        self.now = now
        self.warnings: list[str] = []  # sentences for the operator: a damaged file kept aside

    @classmethod
    async def open(cls, url: str, *, now: Callable[[], datetime] = utc_now, breaker: Breaker | None = None) -> ThreadStore:
        """Connect, create the schema of an empty database or migrate an older one. HistorySchemaError: a newer
        schema or a database that is not ours; HistoryUnavailable: cannot connect (at once while `breaker` is open)."""
        engine, kept = await asyncio.to_thread(database.create_engine, url)  # the SQLite file check reads it whole
        store = cls(engine, url, now, breaker)
        if kept:
            store.warnings.append(kept)
        try:
            await store._migrate()
        except BaseException:
            await engine.dispose()
            raise
        return store

    @_guarded("be opened (connect, then create or migrate its schema)")
    async def _migrate(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(database.migrate, self.where, self.now)

    async def close(self) -> None:
        await self.engine.dispose()

    @_guarded("read its schema version")
    async def schema_version(self) -> int:
        async with self.reader.connect() as conn:
            return (await conn.run_sync(database.schema_state))[0]

    # users

    @_guarded("save a user")
    async def upsert_user(self, identifier: str, metadata: dict) -> UserRow:
        u = schema.users
        async with self.engine.begin() as conn:
            await self._insert_ignore(
                conn, u, {"id": str(uuid.uuid4()), "identifier": identifier, "created_at": self.now(), "metadata": dict(metadata)}
            )
            await conn.execute(sa.update(u).where(u.c.identifier == identifier).values(metadata=dict(metadata)))
            r = (await conn.execute(sa.select(u).where(u.c.identifier == identifier))).one()
        return UserRow(r.id, r.identifier, r.created_at, dict(r.metadata or {}))

    @_guarded("read a user")
    async def get_user(self, identifier: str) -> UserRow | None:
        u = schema.users
        async with self.reader.connect() as conn:
            r = (await conn.execute(sa.select(u).where(u.c.identifier == identifier))).first()
        return UserRow(r.id, r.identifier, r.created_at, dict(r.metadata or {})) if r else None

    @_guarded("delete a user")
    async def delete_user(self, identifier: str) -> bool:
        """The user's row only (their threads: `delete_threads_of`)."""
        async with self.engine.begin() as conn:
            return (await conn.execute(sa.delete(schema.users).where(schema.users.c.identifier == identifier))).rowcount > 0

    # threads

    @_guarded("save a thread")
    async def upsert_thread(
        self,
        thread_id: str,
        *,
        user: str | None = None,
        name: str | None = None,
        metadata: dict | None = None,
        tags: list[str] | None = None,
    ) -> None:
        """Create the thread or update what is given: metadata merged into the stored, tags replaced, the user
        set once (a thread never changes owner)."""
        async with self.engine.begin() as conn:
            await self._touch(conn, thread_id, user)
            t = schema.threads
            values: dict[str, Any] = {}
            if name is not None:
                values["name"] = name
            if tags is not None:
                values["tags"] = list(tags)
            if metadata:
                stored = (await conn.execute(sa.select(t.c.metadata).where(t.c.id == thread_id))).scalar_one()
                values["metadata"] = {**(stored or {}), **metadata}
            if values:
                await conn.execute(sa.update(t).where(t.c.id == thread_id).values(**values))

    @_guarded("name a thread")
    async def name_thread(self, thread_id: str, name: str, *, user: str | None = None, replacing: Iterable[str] = ()) -> bool:
        """Name the thread if it has no name yet, or one of `replacing` (generic names, e.g. the title its first button
        gave it): a name the user chose stays. One conditional UPDATE, so two tasks naming one thread (Chainlit's first
        interaction and the app's own name) end with the specific name in either order. True if named now."""
        async with self.engine.begin() as conn:
            await self._touch(conn, thread_id, user)
            t = schema.threads
            unnamed = t.c.name.is_(None)
            generic = sorted(set(replacing))
            named = await conn.execute(
                sa.update(t).where(t.c.id == thread_id, sa.or_(unnamed, t.c.name.in_(generic)) if generic else unnamed).values(name=name)
            )
            return named.rowcount > 0

    @_guarded("read a thread")
    async def get_thread(self, thread_id: str) -> ThreadRow | None:
        async with self.reader.connect() as conn:
            r = (await conn.execute(sa.select(schema.threads).where(schema.threads.c.id == thread_id))).first()
        return _thread_row(r) if r else None

    @_guarded("read a thread's owner")
    async def thread_user(self, thread_id: str) -> str | None:
        t = schema.threads
        async with self.reader.connect() as conn:
            return (await conn.execute(sa.select(t.c.user_identifier).where(t.c.id == thread_id))).scalar()

    @_guarded("check which threads exist")
    async def existing_threads(self, thread_ids: Iterable[str]) -> set[str]:
        """Which of `thread_ids` are threads in this database (batched: a docs index's sweep asks for all its
        conversations at once)."""
        ids, t, found = sorted(set(thread_ids)), schema.threads, set()
        async with self.reader.connect() as conn:
            for start in range(0, len(ids), 500):
                found.update((await conn.execute(sa.select(t.c.id).where(t.c.id.in_(ids[start : start + 500])))).scalars())
        return found

    @_guarded("check whether any thread exists")
    async def has_threads(self) -> bool:
        """Whether the database holds any thread at all (an empty one answers every sweep with 'deleted')."""
        async with self.reader.connect() as conn:
            return (await conn.execute(sa.select(schema.threads.c.id).limit(1))).first() is not None

    @_guarded("list threads")
    async def list_threads(
        self, user: str, *, search: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> tuple[list[ThreadRow], str | None]:
        """`user`'s threads, newest activity first, at most `limit`; `search`: in the name, any case; the cursor
        of the next page, None on the last."""
        t = schema.threads
        q = sa.select(t).where(t.c.user_identifier == user)
        if search:
            q = q.where(sa.func.lower(t.c.name).like(_like(search), escape="\\"))
        if cursor:
            when, last_id = _decode_cursor(cursor)
            q = q.where(sa.or_(t.c.updated_at < when, sa.and_(t.c.updated_at == when, t.c.id < last_id)))
        q = q.order_by(t.c.updated_at.desc(), t.c.id.desc()).limit(max(1, limit) + 1)
        async with self.reader.connect() as conn:
            rows = [_thread_row(r) for r in (await conn.execute(q)).all()]
        page = rows[: max(1, limit)]
        return page, (_encode_cursor(page[-1]) if len(rows) > len(page) else None)

    @_guarded("delete a thread")
    async def delete_thread(self, thread_id: str) -> None:
        async with self.engine.begin() as conn:
            await self._delete_threads(conn, [thread_id])

    @_guarded("count a user's threads")
    async def count_threads_of(self, user: str) -> int:
        """`user`'s threads, those kept when a user of that name was removed included (`retire_threads_of`)."""
        async with self.reader.connect() as conn:
            return (await conn.execute(sa.select(sa.func.count()).where(_of(user)))).scalar_one()

    @_guarded("measure a user's files")
    async def file_bytes_of(self, user: str) -> int:
        """The bytes of every file stored in `user`'s own threads (uploads and what was made from them): what the
        upload quota counts. Retired threads of an earlier user of that name are not this user's."""
        t, e = schema.threads, schema.elements
        held = sa.select(sa.func.coalesce(sa.func.sum(sa.func.length(e.c.content)), 0)).select_from(e.join(t, e.c.thread_id == t.c.id))
        async with self.reader.connect() as conn:
            return int((await conn.execute(held.where(t.c.user_identifier == user))).scalar_one())

    @_guarded("delete a user's threads")
    async def delete_threads_of(self, user: str) -> int:
        """`user`'s threads, the retired ones of that name included, with everything in them."""
        t = schema.threads
        async with self.engine.begin() as conn:
            ids = list((await conn.execute(sa.select(t.c.id).where(_of(user)))).scalars())
            return await self._delete_threads(conn, ids)

    @_guarded("keep a removed user's threads")
    async def retire_threads_of(self, user: str) -> str:
        """A removed user's threads, kept: they move to `<user>~removed-<time>`, a name no login can have (the users
        file allows no '~'), so the next user given that name starts without them (issue 34). Returns that id."""
        t = schema.threads
        retired = f"{user}{RETIRED}{self.now().strftime('%Y%m%dT%H%M%S%fZ')}"
        async with self.engine.begin() as conn:
            await conn.execute(sa.update(t).where(t.c.user_identifier == user).values(user_identifier=retired))
        return retired

    async def delete_older_than(self, cutoff: datetime) -> int:  # guarded by delete_idle (one trial call, not two nested)
        """Threads whose last activity is before `cutoff`, with everything in them."""
        return len(await self.delete_idle(cutoff))

    @_guarded("delete old threads")
    async def delete_idle(self, cutoff: datetime) -> list[tuple[str | None, str]]:
        """Like `delete_older_than`, and says which: (owner, thread id) of each deleted thread, so the caller
        can remove what lives outside this database (a thread's uploads in the document index)."""
        t = schema.threads
        async with self.engine.begin() as conn:
            rows = (await conn.execute(sa.select(t.c.user_identifier, t.c.id).where(t.c.updated_at < cutoff).order_by(t.c.id))).all()
            await self._delete_threads(conn, [thread_id for _, thread_id in rows])
            return [(user, thread_id) for user, thread_id in rows]

    # steps

    @_guarded("save a message")
    async def upsert_step(self, step: dict) -> None:
        """Insert the step or merge `step` into the stored one; a new step's thread is created if missing.
        Two hosts or tasks saving the same step at once: one inserts, the other merges into it."""
        step_id = step.get("id")
        if not step_id:
            raise HistoryError("a step without an id cannot be saved")
        s = schema.steps
        async with self.engine.begin() as conn:
            thread_id = await self._owner_of(conn, s, step_id, step, "step")
            row = {"id": step_id, "thread_id": thread_id, "created_at": _created(step), "type": step.get("type"), "data": dict(step)}
            await self._insert_or_merge(conn, s, row, step, lambda merged: {"created_at": _created(merged), "type": merged.get("type")})

    @_guarded("delete a message")
    async def delete_step(self, step_id: str) -> None:
        s = schema.steps
        async with self.engine.begin() as conn:
            thread_id = (await conn.execute(sa.select(s.c.thread_id).where(s.c.id == step_id))).scalar()
            if thread_id is None:
                return
            await self._touch(conn, thread_id)  # the thread's row first, as every write (`_owner_of`)
            await conn.execute(sa.delete(schema.feedback).where(schema.feedback.c.step_id == step_id))
            await conn.execute(sa.delete(s).where(s.c.id == step_id))

    @_guarded("read a thread's messages")
    async def steps(self, thread_id: str) -> list[dict]:
        """The thread's steps by createdAt, then in the order they were first saved."""
        s = schema.steps
        q = sa.select(s.c.data).where(s.c.thread_id == thread_id).order_by(s.c.created_at, s.c.seq)
        async with self.reader.connect() as conn:
            return [dict(d) for d in (await conn.execute(q)).scalars()]

    # elements

    @_guarded("save a file or element")
    async def upsert_element(self, element: dict, content: bytes | None) -> None:
        """Insert or merge the element; `content` None keeps the bytes already stored."""
        element_id = element.get("id")
        if not element_id:
            raise HistoryError("an element without an id cannot be saved")
        e = schema.elements
        async with self.engine.begin() as conn:
            thread_id = await self._owner_of(conn, e, element_id, element, "element")
            row = {"id": element_id, "thread_id": thread_id, "for_id": element.get("forId"), "data": dict(element), "content": content}
            kept = {} if content is None else {"content": content}  # None keeps the bytes already stored
            await self._insert_or_merge(conn, e, row, element, lambda merged: {"for_id": merged.get("forId"), **kept})

    @_guarded("read an element")
    async def get_element(self, thread_id: str, element_id: str) -> dict | None:
        e = schema.elements
        async with self.reader.connect() as conn:
            data = (await conn.execute(sa.select(e.c.data).where(e.c.id == element_id, e.c.thread_id == thread_id))).scalar()
        return dict(data) if data is not None else None

    @_guarded("read a file")
    async def element_content(self, thread_id: str, element_id: str) -> bytes | None:
        e = schema.elements
        async with self.reader.connect() as conn:
            return (await conn.execute(sa.select(e.c.content).where(e.c.id == element_id, e.c.thread_id == thread_id))).scalar()

    @_guarded("read a thread's elements")
    async def elements(self, thread_id: str) -> list[dict]:
        e = schema.elements
        async with self.reader.connect() as conn:
            return [dict(d) for d in (await conn.execute(sa.select(e.c.data).where(e.c.thread_id == thread_id).order_by(e.c.id))).scalars()]

    @_guarded("delete an element")
    async def delete_element(self, element_id: str, thread_id: str | None = None) -> None:
        e = schema.elements
        q = sa.select(e.c.thread_id).where(e.c.id == element_id)
        if thread_id is not None:
            q = q.where(e.c.thread_id == thread_id)
        async with self.engine.begin() as conn:
            owner = (await conn.execute(q)).scalar()
            if owner is None:
                return
            await self._touch(conn, owner)  # the thread's row first, as every write (`_owner_of`)
            await conn.execute(sa.delete(e).where(e.c.id == element_id))

    # feedback

    @_guarded("save feedback")
    async def upsert_feedback(self, *, feedback_id: str | None, step_id: str, value: int, comment: str | None) -> str:
        """Insert (a new id when `feedback_id` is None) or update the feedback on `step_id`; returns its id."""
        f, s = schema.feedback, schema.steps
        async with self.engine.begin() as conn:
            thread_id = (await conn.execute(sa.select(s.c.thread_id).where(s.c.id == step_id))).scalar()
            if thread_id is None:
                raise HistoryError(f"no message {step_id} in the chat history to attach feedback to")
            await self._touch(conn, thread_id)  # the thread's row first, as every write (`_owner_of`)
            fid = feedback_id or str(uuid.uuid4())
            rated = (await conn.execute(sa.select(f.c.step_id).where(f.c.id == fid))).scalar()
            if rated is not None and rated != step_id:  # a rating never moves to another message (issue 34)
                raise HistoryError(f"feedback {fid} rates another message than {step_id}; not written")
            now = self.now()
            values = {"thread_id": thread_id, "step_id": step_id, "value": int(value), "comment": comment, "updated_at": now}
            await self._insert_ignore(conn, f, {"id": fid, "created_at": now, **values})
            await conn.execute(sa.update(f).where(f.c.id == fid).values(**values))
        return fid

    @_guarded("read an item's thread")
    async def thread_of(self, table: str, item_id: str) -> str | None:
        """The thread a stored step, element or feedback belongs to (None: not stored); a feedback's is the thread of
        the message it rates: whose it is to change or remove."""
        t = {"step": schema.steps, "element": schema.elements, "feedback": schema.feedback}[table]
        async with self.reader.connect() as conn:
            return (await conn.execute(sa.select(t.c.thread_id).where(t.c.id == item_id))).scalar()

    @_guarded("delete feedback")
    async def delete_feedback(self, feedback_id: str) -> bool:
        f = schema.feedback
        async with self.engine.begin() as conn:
            thread_id = (await conn.execute(sa.select(f.c.thread_id).where(f.c.id == feedback_id))).scalar()
            if thread_id is None:
                return False
            await self._touch(conn, thread_id)  # the thread's row first, as every write (`_owner_of`)
            await conn.execute(sa.delete(f).where(f.c.id == feedback_id))
            return True

    @_guarded("read feedback")
    async def feedback_since(self, since: datetime) -> list[FeedbackRow]:
        """Feedback given or changed since `since`, oldest first, each with its step, question and elements."""
        f, t = schema.feedback, schema.threads
        q = (
            sa.select(f, t.c.user_identifier, t.c.name.label("thread_name"))
            .join(t, t.c.id == f.c.thread_id)
            .where(f.c.updated_at >= since)
            .order_by(f.c.updated_at, f.c.id)
        )
        out: list[FeedbackRow] = []
        async with self.reader.connect() as conn:
            rows = (await conn.execute(q)).all()
            threads: dict[str, list[dict]] = {}
            for r in rows:
                if r.thread_id not in threads:
                    threads[r.thread_id] = await self._steps(conn, r.thread_id)
                step, question = _answer_and_question(threads[r.thread_id], r.step_id)
                e = schema.elements
                q_shown = sa.select(e.c.data, e.c.content).where(e.c.for_id == r.step_id).order_by(e.c.id)
                shown_rows = (await conn.execute(q_shown)).all()
                shown = [dict(x.data) for x in shown_rows]
                texts = {x.data["id"]: _text(x.content) for x in shown_rows if x.data.get("type") == "text" and x.content is not None}
                out.append(
                    FeedbackRow(
                        id=r.id,
                        created_at=r.created_at,
                        updated_at=r.updated_at,
                        user=r.user_identifier,
                        thread_id=r.thread_id,
                        thread_name=r.thread_name,
                        step_id=r.step_id,
                        value=r.value,
                        comment=r.comment,
                        step=step,
                        question=question,
                        elements=shown,
                        texts=texts,
                    )
                )
        return out

    # helpers (inside the caller's transaction)

    async def _steps(self, conn: AsyncConnection, thread_id: str) -> list[dict]:
        s = schema.steps
        q = sa.select(s.c.data).where(s.c.thread_id == thread_id).order_by(s.c.created_at, s.c.seq)
        return [dict(d) for d in (await conn.execute(q)).scalars()]

    async def _touch(self, conn: AsyncConnection, thread_id: str, user: str | None = None) -> None:
        """Create the thread if missing; set its updated_at to now and its user if it has none yet."""
        t = schema.threads
        now = self.now()
        new = {"id": thread_id, "user_identifier": user, "name": None, "created_at": now, "updated_at": now, "metadata": {}, "tags": []}
        values: dict[str, Any] = {"updated_at": now}
        if user is not None:
            values["user_identifier"] = sa.func.coalesce(t.c.user_identifier, user)
        # Twice at most: on PostgreSQL the UPDATE may wait for a transaction deleting the thread and then find no
        # row; the thread is made again, as if this write came after the delete (what SQLite's order gives).
        for _ in range(2):
            if await self._insert_ignore(conn, t, new):
                return
            if (await conn.execute(sa.update(t).where(t.c.id == thread_id).values(**values))).rowcount:
                return
        raise HistoryUnavailable(f"the chat history database {self.where} could not save into thread {thread_id}: deleted twice meanwhile")

    async def _insert_or_merge(
        self, conn: AsyncConnection, table: sa.Table, row: dict, item: dict, columns: Callable[[dict], dict[str, Any]]
    ) -> None:
        """Insert `row`; if another task or host inserted it first, merge `item` into the stored dict under a row
        lock and update `columns(merged)` beside it. An item never moves thread."""
        if await self._insert_ignore(conn, table, row):
            return
        stored = (await conn.execute(sa.select(table.c.data).where(table.c.id == row["id"]).with_for_update())).scalar_one()
        merged = {**(stored or {}), **item, "threadId": row["thread_id"]}
        await conn.execute(sa.update(table).where(table.c.id == row["id"]).values(data=merged, **columns(merged)))

    async def _insert_ignore(self, conn: AsyncConnection, table: sa.Table, values: dict) -> bool:
        """INSERT unless a row with the same key exists (even one another transaction is inserting); True if inserted."""
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        key = next(iter(table.primary_key.columns))
        stmt = dialect.insert(table).values(**values).on_conflict_do_nothing().returning(key)
        return (await conn.execute(stmt)).first() is not None

    async def _owner_of(self, conn: AsyncConnection, table: sa.Table, item_id: str, item: dict, what: str) -> str:
        """The thread of a stored step/element (it never moves), else the new one's threadId; the thread is
        created if missing and touched, first, so every write locks the thread before the item. A write naming
        another thread than the stored item's is refused: the caller checked the owner of the thread it named,
        and an id copied from another user's thread must not reach that thread (issue 34)."""
        stored = (await conn.execute(sa.select(table.c.thread_id).where(table.c.id == item_id))).scalar()
        given = item.get("threadId")
        if stored is not None and given and given != stored:
            raise HistoryError(f"{what} {item_id} belongs to another thread than {given}; not written")
        thread_id = stored or given
        if not thread_id:
            raise HistoryError(f"{what} {item_id} has no threadId")
        await self._touch(conn, thread_id)
        return thread_id

    async def _delete_threads(self, conn: AsyncConnection, ids: list[str]) -> int:
        deleted = 0
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            t = schema.threads  # the threads' rows first, in one order, as every write (`_owner_of`)
            await conn.execute(sa.select(t.c.id).where(t.c.id.in_(chunk)).order_by(t.c.id).with_for_update())
            for table in (schema.feedback, schema.elements, schema.steps):
                await conn.execute(sa.delete(table).where(table.c.thread_id.in_(chunk)))
            deleted += (await conn.execute(sa.delete(schema.threads).where(schema.threads.c.id.in_(chunk)))).rowcount
        return deleted


RETIRED = "~removed-"  # between a removed user's name and the time their kept threads were retired


def _of(user: str):
    """The threads of `user`, and those retired from a user of that name."""
    t = schema.threads
    return sa.or_(t.c.user_identifier == user, t.c.user_identifier.like(f"{_like_literal(user)}{RETIRED}%", escape="\\"))


def _answer_and_question(steps: list[dict], step_id: str) -> tuple[dict | None, dict | None]:
    """The rated step and the last user message before it in the thread's order."""
    for i, step in enumerate(steps):
        if step.get("id") == step_id:
            question = next((s for s in reversed(steps[:i]) if s.get("type") == "user_message"), None)
            return step, question
    return None, None
