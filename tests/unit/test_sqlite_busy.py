"""A database another process is writing is busy, never damaged. Each store over SQLite (the document index, the
onboarding push log, the chat history) meets a second connection that holds the file's write lock in exclusive
locking mode past the busy timeout (what an operator's `sqlite3` shell or a backup tool can do): it says the file
is busy and moves nothing, and once the lock is released the same data is there. Before the fix the live file
was renamed `*.corrupt-*` with its -wal and an empty one started. The busy timeouts are lowered to 0.2 s here.
An I/O error cannot be produced on demand: a STUB connection raises SQLite's own error code for it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ernie_ops.docs import index_file
from ernie_ops.docs.model import Chunk
from ernie_ops.docs.store import Index, StoreError
from ernie_ops.files import sqlite_file
from ernie_ops.onboarding import pushlog
from ernie_ops.onboarding.pushlog import NewItem, PushLog, PushLogError
from ernie_ops.threads import database
from ernie_ops.threads.store import HistoryUnavailable, ThreadStore


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """Another connection holding the write lock of `path` (exclusive locking mode, a write begun) until the block ends."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version = {version}")  # a write: the exclusive lock is taken and kept
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        conn.close()


def nothing_moved(directory: Path) -> None:
    assert not list(directory.glob("*.corrupt-*")), sorted(p.name for p in directory.iterdir())


def test_a_busy_document_index_is_reported_busy_and_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(index_file, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "docs.sqlite"
    with Index(path) as idx:
        idx.add("a.md", "sha-a", 5, "text", [Chunk("alpha", 0, 0, 5)])
    with held(path), pytest.raises(StoreError, match=r"is busy: another process has been writing it"), Index(path):
        pass
    nothing_moved(tmp_path)
    with Index(path) as idx:
        assert [d.name for d in idx.documents()] == ["a.md"] and not idx.warnings


def test_a_busy_push_log_is_reported_busy_and_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(pushlog, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "onboarding.sqlite"
    with PushLog(path) as pl:
        pl.push("e1", [NewItem("welcome", "welcome", "欢迎")])
    with held(path), pytest.raises(PushLogError, match=r"is busy: another process has been writing it"), PushLog(path):
        pass
    nothing_moved(tmp_path)
    with PushLog(path) as pl:
        assert [i.item_id for i in pl.items("e1")] == ["welcome"] and not pl.warnings


def test_a_busy_chat_history_is_reported_busy_and_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "history.sqlite"
    url = f"sqlite+aiosqlite:///{path}"

    async def open_and_close() -> list[str]:
        store = await ThreadStore.open(url)
        try:
            return store.warnings
        finally:
            await store.close()

    asyncio.run(open_and_close())
    before = path.read_bytes()
    with held(path), pytest.raises(HistoryUnavailable, match=r"is busy: another process held its write lock past 0.2 s; nothing was moved"):
        asyncio.run(open_and_close())
    nothing_moved(tmp_path)
    assert path.read_bytes() == before
    assert asyncio.run(open_and_close()) == []


class _Failing:
    """STUB: a connection whose quick_check fails with SQLite's error code `code` (errors a test cannot cause for real)."""

    def __init__(self, message: str, code: int):
        self.exc = sqlite3.OperationalError(message)
        self.exc.sqlite_errorcode = code

    def execute(self, _sql: str):
        raise self.exc


def test_only_an_error_sqlite_calls_damage_is_damage():
    assert sqlite_file.damage(_Failing("database disk image is malformed", sqlite3.SQLITE_CORRUPT)) == "database disk image is malformed"
    errors = (("disk I/O error", 266), ("database is locked", sqlite3.SQLITE_BUSY), ("attempt to write a readonly database", 8))
    for message, code in errors:
        with pytest.raises(sqlite3.OperationalError, match=message):
            sqlite_file.damage(_Failing(message, code))  # SQLITE_IOERR_READ (266), busy, read-only: said as they are
    assert sqlite_file.locked(_Failing("database is locked", sqlite3.SQLITE_BUSY).exc)
    assert not sqlite_file.locked(_Failing("disk I/O error", 266).exc)
