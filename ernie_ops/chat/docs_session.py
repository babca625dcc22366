"""One chat session's documents, without Chainlit: what it may search, its own uploads, retrieval.

A session searches the shared collections its user may read (chat.docs.collections; the user can
narrow the choice in the chat settings, never widen it) plus the files uploaded in this very
conversation, which belong to (user, conversation) and are never retrieved for anyone else. The
SQLite work and the extraction child run in a worker thread, so a slow PDF never stalls the event
loop that streams other users' replies; the process keeps one connection to the index (`shared_index`: the
store serialises on its own lock), opened at the first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ernie_ops.docs import followup, ingest, store
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.extract import check_size
from ernie_ops.docs.model import DocumentError
from ernie_ops.docs.retrieve import Retrieved, Retriever, allowed_collections
from ernie_ops.docs.store import Index, Scope

log = logging.getLogger("ernie_ops.chat")

NO_ANSWER = (
    "文档中没有找到能回答这个问题的内容，我不凭空作答。可以换个说法，或上传相关文档。\n"
    "The documents do not answer this, so I will not guess. Try other words, or upload the document that does."
)
NO_DOCUMENTS = (
    "还没有可检索的文档：请用输入框旁的回形针上传 PDF、Markdown、TXT 或 DOCX 文件，或把文件拖到这里。\n"
    "There are no documents to search yet: attach PDF, Markdown, text or DOCX files with the paper clip, or drop them here."
)


@dataclass(frozen=True)
class Upload:
    path: str | None  # where Chainlit stored it
    name: str  # the name the browser sent
    size: int | None = None


_SHARED: dict[tuple[str, str], Index] = {}
_SHARED_LOCK = threading.Lock()


@contextlib.contextmanager
def shared_index(cfg: DocsConfig) -> Iterator[Index]:
    """The process's one connection to the index (thread-safe: the store serialises on its own lock).
    Opening per question would repeat the store's open-time work, a whole-file quick_check among it
    whenever another process has written since (about 1 s at 100k passages)."""
    key = (cfg.index_file, cfg.tokenizer)
    with _SHARED_LOCK:
        index = _SHARED.get(key)
        if index is None:
            index = _SHARED[key] = store.open_index(cfg.index_file, cfg.tokenizer)
    yield index


class DocsSession:
    def __init__(self, cfg: DocsConfig, user: str, conversation: str, embed=None):
        self.cfg, self.user, self.conversation, self.embed = cfg, user, conversation, embed
        self.picked: list[str] | None = None  # the user's choice in the chat settings; None: all allowed
        self.asked: list[str] = []  # this conversation's questions so far, oldest first: a follow-up is searched with them

    # -- scope ------------------------------------------------------------------------------------
    def _allowed(self, index: Index) -> list[str]:
        return allowed_collections(self.cfg, self.user, [c.name for c in index.collections()])

    def scope(self, index: Index) -> Scope:
        allowed = self._allowed(index)
        chosen = allowed if self.picked is None else [c for c in self.picked if c in allowed]
        return Scope(collections=chosen, owner=self.user, conversation=self.conversation)

    async def collections(self) -> list[str]:
        def run() -> list[str]:
            with shared_index(self.cfg) as index:
                return self._allowed(index)

        return await asyncio.to_thread(run)

    def pick(self, names: list[str] | None) -> None:
        self.picked = None if names is None else list(names)

    async def has_documents(self) -> bool:
        def run() -> bool:
            with shared_index(self.cfg) as index:
                return bool(index.documents(self.scope(index)))

        return await asyncio.to_thread(run)

    # -- uploads ----------------------------------------------------------------------------------
    async def upload(self, files: list[Upload]) -> list[ingest.Outcome]:
        """Index this conversation's files; one outcome per file (a refused file says why)."""
        limit = self.cfg.max_files_per_message
        if len(files) > limit:
            return [
                ingest.Outcome(
                    f"{len(files)} files", "failed", reason="too_many",
                    error=f"{len(files)} files at once: at most {limit} per message (chat.docs.max_files_per_message); "
                    f"nothing was indexed, send them in smaller groups",
                )
            ]  # fmt: skip

        def run() -> list[ingest.Outcome]:
            out = []
            with shared_index(self.cfg) as index:
                for f in files:
                    out.append(self._one(index, f))
            return out

        return await asyncio.to_thread(run)

    def _one(self, index: Index, f: Upload) -> ingest.Outcome:
        try:
            if f.size is not None:
                check_size(f.name, f.size, ingest.limits(self.cfg))  # before reading it
            if not f.path:
                raise DocumentError(f.name, "unreadable", "arrived without content; upload it again")
            data = Path(f.path).read_bytes()
        except DocumentError as exc:
            log.info("docs: upload by %s refused: %s (%s)", self.user, exc, exc.reason)
            return ingest.Outcome(exc.name or f.name, "failed", error=str(exc), reason=exc.reason)
        except OSError as exc:
            return ingest.Outcome(f.name, "failed", reason="unreadable", error=f"{f.name}: cannot be read: {exc.strerror or exc}")
        return self.index_upload(index, data, f.name)

    def index_upload(self, index: Index, data: bytes, name: str) -> ingest.Outcome:
        """One file's bytes into this conversation's uploads (the chat's upload, or its stored copy on another host)."""
        try:
            return ingest.index_bytes(
                index, data, name, self.cfg, collection="uploads", owner=self.user, conversation=self.conversation, embed=self.embed
            )
        except DocumentError as exc:
            log.info("docs: upload by %s refused: %s (%s)", self.user, exc, exc.reason)
            return ingest.Outcome(exc.name or name, "failed", error=str(exc), reason=exc.reason)

    async def forget(self) -> int:
        """Drop this conversation's uploads (history off: the chat ended; history on: its thread was deleted)."""

        def run() -> int:
            with shared_index(self.cfg) as index:
                return index.remove_conversation(self.user, self.conversation)

        return await asyncio.to_thread(run)

    # -- retrieval --------------------------------------------------------------------------------
    async def retrieve(self, question: str) -> Retrieved:
        """The passages for the newest question; one that leans on the ones before ("那它保留多久？") is searched with them."""
        previous = list(self.asked)
        self.asked = [*self.asked, question][-followup.MAX_CONTEXT :]

        def run() -> Retrieved:
            with shared_index(self.cfg) as index:
                return Retriever(index, self.cfg, self.embed).search(question, self.scope(index), previous=previous)

        return await asyncio.to_thread(run)


def forget_all_uploads(cfg: DocsConfig) -> int:
    """At the app's start with history off: every chat of the previous process is gone (sessions live in memory), so are
    the files uploaded into them."""
    with store.open_index(cfg.index_file, cfg.tokenizer) as index:
        private = [d for d in index.documents() if d.owner is not None]
        for d in private:
            index.remove(d.doc_id)
    return len(private)


def forget_uploads_of(cfg: DocsConfig, user: str) -> int:
    """Every upload of `user`, in all their conversations, leaves this host's index (their threads were deleted);
    how many. An index file that does not exist yet is left uncreated."""
    if not Path(cfg.index_file).exists():
        return 0
    with store.open_index(cfg.index_file, cfg.tokenizer) as index:
        theirs = [d for d in index.documents() if d.owner == user]
        for d in theirs:
            index.remove(d.doc_id)
    return len(theirs)


def upload_summary(outcomes: list[ingest.Outcome]) -> tuple[str, list[str]]:
    """(a line for what was indexed, [one sentence per refused file])."""
    done = [o for o in outcomes if o.action != "failed"]
    parts = []
    for o in done:
        size = f"{o.pages} 页 pages, " if o.pages else ""
        scanned = f"; {ingest.no_text_layer_zh(o.empty_pages)} / {ingest.no_text_layer(o.empty_pages)}" if o.empty_pages else ""
        parts.append(f"{o.name} ({size}{o.chunks} 段 passages{scanned})")
    line = ("已索引 / Indexed: " + "; ".join(parts)) if parts else ""
    return line, [o.error for o in outcomes if o.action == "failed"]
