"""What every SQLite file of the project does the same way: open under a lock, connect with a busy
timeout, check for damage, tell a locked database apart, and turn an OSError into a sentence.

Used by the document index (docs/store.py) and the onboarding push log (onboarding/pushlog.py); each
keeps its own schema, error class and wording of what the file is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) for as long as the block runs."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def connect(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    """Autocommit (the caller opens its own BEGIN IMMEDIATE), shareable across threads under the caller's lock."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    return conn


def damage(conn: sqlite3.Connection) -> str | None:
    """None if the database is sound, else what is wrong (the first quick_check line or SQLite's error)."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    if rows != [("ok",)]:
        return str(rows[0][0]) if rows else "quick_check returned nothing"
    return None


def locked(exc: BaseException) -> bool:
    """SQLite gave up waiting for another writer (after the busy timeout)."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def os_problem(exc: OSError, where: str, elsewhere: str) -> str:
    """'<reason>; <what to do>' for an OSError met opening a database file. `where`: what a path part must be
    ("the index", "the state directory"); `elsewhere`: the last resort ("point the index at another directory")."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "run as the chat app's user or fix the directory's owner"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on its file system"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        reason, fix = "a part of that path is a file, not a directory", f"point {where} at a directory"
    else:
        fix = f"fix it or {elsewhere}"
    return f"{reason}; {fix}"
