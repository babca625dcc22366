"""A Docs thread's uploads in this host's document index, kept in step with the history database (no Chainlit here).

With several chat hosts behind an edge, each host has its own document index while the history database is
shared. A thread resumed on another host than the one it was uploaded to would find none of its uploads'
passages: `restore_uploads` (called by the app at resume) indexes the stored copies of the thread's files that
this host's index lacks. A thread deleted elsewhere (another host's sidebar or retention, `ernie-ops chat-user
remove --delete-threads`) leaves its passages on this host: `sweep_orphan_uploads` (at the app's start and
daily) drops the uploads whose thread no longer exists; a database that cannot be read, holds no thread at
all, or would have more than chat.docs.sweep_max_share of the uploads go in one pass drops nothing.

Which elements are uploads: Chainlit saves a file sent with a message as an element whose `forId` is that user
message (type file, pdf, image...: chosen from its mime); the app's own elements hang off assistant messages
(the sources, type text) or are cards (type custom).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePath
from typing import Any, Protocol

from ernie_ops.chat.docs_session import DocsSession, shared_index
from ernie_ops.chat.thread_dicts import ORDER_KEY
from ernie_ops.docs import ingest
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.extract import SUFFIXES
from ernie_ops.docs.store import Document, Scope
from ernie_ops.errors import ErnieOpsError

log = logging.getLogger("ernie_ops.chat")

ReadBytes = Callable[[str, str], Awaitable[bytes | None]]  # (thread id, element id) -> the stored bytes


class Threads(Protocol):
    """What the sweep asks the history database (threads.store.ThreadStore answers both)."""

    async def existing_threads(self, thread_ids: list[str]) -> set[str]: ...

    async def has_threads(self) -> bool: ...


NOT_FILES = ("text", "custom")  # sources shown with a reply, cards: never an upload
SWEEP_FLOOR = 5  # uploads one pass may always remove, whatever share they are (a user deleting a thread with a few files)
SWEEP_GRACE = timedelta(hours=1)  # an upload younger than this is kept even if its thread is not (yet) in the database:
# Chainlit saves the message (and so creates the thread) in a task beside the upload's indexing, and a thread
# written while the database was down appears with its next message


@dataclass(frozen=True)
class StoredUpload:
    element_id: str
    name: str
    copies: int = 1  # elements of this name in the thread (a file sent again): the newest is the one indexed


@dataclass
class Restored:
    indexed: list[str] = field(default_factory=list)  # re-indexed on this host now
    present: list[str] = field(default_factory=list)  # already in this host's index
    failed: list[ingest.Outcome] = field(default_factory=list)


class NotTheOwner(ErnieOpsError):
    """A thread's uploads asked for by a session of another user than the thread's owner."""


def stored_uploads(thread: Mapping[str, Any]) -> list[StoredUpload]:
    """The files the user sent in this thread, the newest element per name, in the order they were sent. Names
    the index never takes (an image) are left out: they were refused at upload already."""
    asked = {s.get("id") for s in thread.get("steps") or [] if s.get("type") == "user_message"}
    files = [
        e
        for e in thread.get("elements") or []
        if e.get("forId") in asked and e.get("id") and e.get("name") and e.get("type") not in NOT_FILES
        and PurePath(str(e["name"])).suffix.lower() in SUFFIXES
    ]  # fmt: skip
    files.sort(key=lambda e: e.get(ORDER_KEY) or 0)
    newest: dict[str, StoredUpload] = {}
    for e in files:
        name = str(e["name"])
        before = newest.pop(name, None)
        newest[name] = StoredUpload(str(e["id"]), name, before.copies + 1 if before else 1)
    return list(newest.values())


def to_restore(uploads: Iterable[StoredUpload], indexed: Iterable[Document]) -> tuple[list[StoredUpload], list[StoredUpload]]:
    """(to index from the stored bytes, already here). The index keys a conversation's upload by its name; a name
    sent more than once is handed to the indexer all the same, which compares content hashes (unchanged: nothing
    is read again) so a host holding an older copy gets the newest."""
    names = {d.name for d in indexed}
    todo, here = [], []
    for u in uploads:
        (here if u.name in names and u.copies == 1 else todo).append(u)
    return todo, here


def thread_owner(thread: Mapping[str, Any], session_user: str) -> str:
    """The thread's owner from the thread itself; the resuming session must be theirs."""
    owner = thread.get("userIdentifier") or thread.get("userId")
    if not owner or owner != session_user:
        raise NotTheOwner(f"thread {thread.get('id')} belongs to {owner or 'nobody'}, not to {session_user}: its uploads are not indexed")
    return str(owner)


async def restore_uploads(
    cfg: DocsConfig, thread: Mapping[str, Any], session_user: str, read: ReadBytes, embed: ingest.Embedder | None = None
) -> Restored:
    """Index the thread's uploads this host's index lacks, from the bytes the history database keeps. Each file
    succeeds or fails alone (logged with its reason); the thread opens either way."""
    thread_id = str(thread.get("id") or "")
    owner = thread_owner(thread, session_user)
    docs = DocsSession(cfg, owner, thread_id, embed=embed)
    uploads = stored_uploads(thread)
    out = Restored()
    if not uploads or not thread_id:
        return out

    def present() -> list[Document]:
        with shared_index(cfg) as index:
            return index.documents(Scope(collections=[], owner=owner, conversation=thread_id))

    todo, here = to_restore(uploads, await asyncio.to_thread(present))
    out.present = [u.name for u in here]
    for u in todo:
        outcome = await _restore_one(docs, thread_id, u, read)
        if outcome.action == "failed":
            log.warning("docs: thread %s of %s: upload %s not re-indexed: %s (%s)", thread_id, owner, u.name, outcome.error, outcome.reason)
            out.failed.append(outcome)
        elif outcome.action == "unchanged":
            out.present.append(u.name)
        else:
            out.indexed.append(u.name)
    log.info("docs: thread %s of %s: %d upload(s) re-indexed from the history database", thread_id, owner, len(out.indexed))
    return out


async def _restore_one(docs: DocsSession, thread_id: str, upload: StoredUpload, read: ReadBytes) -> ingest.Outcome:
    try:
        data = await read(thread_id, upload.element_id)
    except ErnieOpsError as exc:  # the database went away meanwhile
        return ingest.Outcome(upload.name, "failed", reason="unreadable", error=f"{upload.name}: its stored copy cannot be read: {exc}")
    if data is None:
        return ingest.Outcome(upload.name, "failed", reason="unreadable", error=f"{upload.name}: the history database holds no copy of it")

    def run() -> ingest.Outcome:
        with shared_index(docs.cfg) as index:
            return docs.index_upload(index, data, upload.name)

    try:
        return await asyncio.to_thread(run)
    except ErnieOpsError as exc:  # the index itself (full disk, damaged file): this file fails, the thread opens
        return ingest.Outcome(upload.name, "failed", reason=getattr(exc, "reason", "failed"), error=str(exc))


# -- the sweep --------------------------------------------------------------------------------------


def _added(doc: Document) -> datetime:
    return datetime.strptime(doc.added_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def sweepable(documents: Iterable[Document], now: datetime, grace: timedelta = SWEEP_GRACE) -> list[Document]:
    """The uploads a sweep asks about: a conversation's (owner and conversation set), older than `grace`."""
    return [d for d in documents if d.owner is not None and d.conversation is not None and now - _added(d) >= grace]


def orphans(documents: Iterable[Document], existing: set[str]) -> list[Document]:
    return [d for d in documents if d.conversation not in existing]


async def sweep_orphan_uploads(
    cfg: DocsConfig, threads: Threads, now: datetime | None = None, grace: timedelta = SWEEP_GRACE
) -> int | None:
    """Drop this host's uploads whose thread the history database no longer has; how many, or None when nothing was
    dropped for safety: the database could not be asked (unreadable is not empty), holds no thread at all (an emptied
    or replaced database is not a deletion), or would have more than `sweep_max_share` of the uploads go at once."""
    now = now or datetime.now(UTC)
    if not Path(cfg.index_file).exists():  # no upload ever on this host: the sweep creates no index
        return 0

    def candidates() -> tuple[list[Document], int]:
        with shared_index(cfg) as index:
            documents = index.documents()
            uploads = [d for d in documents if d.owner is not None and d.conversation is not None]
            return sweepable(uploads, now, grace), len(uploads)

    docs, total = await asyncio.to_thread(candidates)
    if not docs:
        return 0
    try:
        if not await threads.has_threads():
            log.warning("docs: the history database holds no thread at all: this host's %d upload(s) kept (an emptied or "
                        "replaced database is not a deletion)", total)  # fmt: skip
            return None
        alive = await threads.existing_threads(sorted({str(d.conversation) for d in docs}))
    except ErnieOpsError as exc:
        log.warning("docs: uploads of deleted threads not swept this time (the history database cannot be read): %s", exc)
        return None
    gone = orphans(docs, alive)
    limit = max(SWEEP_FLOOR, int(cfg.sweep_max_share * total))
    if len(gone) > limit:
        log.warning("docs: %d of this host's %d uploads belong to threads the history database lacks, more than "
                    "chat.docs.sweep_max_share %g allows in one pass: none removed (a database restored from an old backup "
                    "is not a deletion; if those threads were deleted, raise the share for one pass)",
                    len(gone), total, cfg.sweep_max_share)  # fmt: skip
        return None

    def drop() -> int:
        with shared_index(cfg) as index:
            return sum(index.remove(d.doc_id) for d in gone)

    dropped = await asyncio.to_thread(drop) if gone else 0
    log.info("docs: %d uploaded document(s) of %d deleted thread(s) removed from this host's index", dropped,
             len({(d.owner, d.conversation) for d in gone}))  # fmt: skip
    return dropped


async def keep_sweeping(threads: Callable[[], Awaitable[Threads]], cfg: DocsConfig, interval: float) -> None:
    """The chat app's sweep task: at once, then every `interval` seconds, until cancelled; a failing pass is logged."""
    while True:
        try:
            await sweep_orphan_uploads(cfg, await threads())
        except ErnieOpsError as exc:
            log.warning("docs: uploads of deleted threads not swept this time, tried again in %.0f s: %s", interval, exc)
        await asyncio.sleep(interval)
