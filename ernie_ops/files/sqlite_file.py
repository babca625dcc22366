"""What every SQLite file of the project does the same way: open under a lock, refuse what is not its own,
keep a damaged file aside, WAL and the schema of a new file (`open_database`), connect with a busy
timeout, tell a locked database apart, and turn an OSError into a sentence.

Used by the document index (docs/store.py) and the onboarding push log (onboarding/pushlog.py); each
keeps its own schema, error class and wording of what the file is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ernie_ops.files.aside import keep_aside


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


DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})  # "malformed", "file is not a database"
BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _primary_code(exc: BaseException) -> int | None:
    """SQLite's result code without its extended bits (SQLITE_IOERR_READ -> SQLITE_IOERR), when Python has it."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_damage(exc: BaseException) -> bool:
    """SQLite itself says the file is damaged. Busy, locked, I/O, permission and full-disk errors are not damage:
    the file is kept where it is (a live database taken for a corrupt one was renamed aside with its data)."""
    return isinstance(exc, sqlite3.DatabaseError) and _primary_code(exc) in DAMAGE_CODES


def damage(conn: sqlite3.Connection) -> str | None:
    """None if the database is sound, else what is wrong (the first quick_check line or SQLite's damage error).
    Any other error of the check (another connection's lock, an I/O error) is raised: it says nothing of the file."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            return str(exc)
        raise
    if rows != [("ok",)]:
        return str(rows[0][0]) if rows else "quick_check returned nothing"
    return None


def locked(exc: BaseException) -> bool:
    """SQLite gave up waiting for another writer (after the busy timeout)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _primary_code(exc)
    return code in BUSY_CODES if code is not None else ("locked" in str(exc) or "busy" in str(exc))


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


SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Kind:
    """One kind of project database: its identity, and how sentences about it name it and what to do."""

    name: str  # "document index"
    a_name: str  # "a document index"
    schema: str  # "index schema" (in the newer-version sentence)
    error: Callable[[str], Exception]  # the module's ErnieOpsError subclass
    application_id: int
    version: int
    elsewhere: str  # "point the index at another file"
    upgrade: str  # what to do about a newer schema
    local_disk: str  # what to do when WAL is refused
    fresh: str  # what a damaged file kept aside means: "started an empty index: add the documents again"


def open_database(
    path: Path, kind: Kind, *, create: Callable[[sqlite3.Connection], None], pragmas: Sequence[str] = (),
    busy_timeout_ms: int, busy: Callable[[], Exception], warnings: list[str], check: bool = True,
) -> sqlite3.Connection:  # fmt: skip
    """Open (or create) the database at `path` under `path`.lock: a file that is not SQLite, another program's
    database or a newer schema is refused and left as it is; a damaged one (quick_check, unless `check` is
    false, or an error SQLite calls damage) is kept aside with a sentence in `warnings` and a fresh one started.
    A busy one raises `busy()`, one that cannot be read for another reason (I/O) the kind's error: never moved.
    WAL, synchronous=NORMAL and `pragmas` on every connection; `create(conn)` builds the schema of a new file
    inside BEGIN IMMEDIATE. OSError propagates for the caller's own sentence."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with flock(path.with_name(path.name + ".lock")):
        head = b""
        if path.exists():
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:
            raise kind.error(f"{path} is not a SQLite database, so it is not {kind.a_name}; move it away or {kind.elsewhere}")
        conn = connect(path, busy_timeout_ms)
        try:
            problem = damage(conn) if head and check else None
            if problem is None:
                return _prepare(conn, path, kind, create, pragmas)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if locked(exc):
                raise busy() from None
            if not is_damage(exc):
                raise kind.error(f"{path} could not be read ({exc}); it was left as it is: fix the cause and start again, "
                                 f"or {kind.elsewhere}") from None  # fmt: skip
            problem = str(exc)
        except BaseException:
            conn.close()
            raise
        conn.close()
        aside = keep_aside(path, ("-wal", "-shm"))
        warnings.append(f"the {kind.name} {path} was damaged ({problem}); kept it as {aside} and {kind.fresh}")
        return _prepare(connect(path, busy_timeout_ms), path, kind, create, pragmas)


def _prepare(conn: sqlite3.Connection, path: Path, kind: Kind, create, pragmas: Sequence[str]) -> sqlite3.Connection:
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        if tables and app_id != kind.application_id:
            raise kind.error(f"{path} is a SQLite database of another program, not {kind.a_name}; {kind.elsewhere}")
        if version > kind.version:
            raise kind.error(
                f"{path} was written by a newer ernie-ops ({kind.schema} {version}, this one knows {kind.version}); {kind.upgrade}"
            )
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise kind.error(f"{path} cannot use a WAL journal (is it on a network file system?); {kind.local_disk}")
        conn.execute("PRAGMA synchronous = NORMAL")
        for pragma in pragmas:
            conn.execute(pragma)
        if version == 0:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                    create(conn)
                    conn.execute(f"PRAGMA application_id = {kind.application_id}")
                    conn.execute(f"PRAGMA user_version = {kind.version}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return conn
    except BaseException:
        conn.close()
        raise
