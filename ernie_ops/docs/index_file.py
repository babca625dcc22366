"""The document index's SQLite file: its schema, opening it (quick_check once per process while the file is
unchanged), one writer at a time (WAL, `BEGIN IMMEDIATE`), a busy file told from a damaged one (only a damaged one
is kept aside, at the next open), and sqlite-vec loaded when vectors are asked for. What is stored in it and how it
is searched: `docs/index_write.py`, `docs/index_search.py`. Why each choice, and the measurements: docs/design/document-index.md.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files.sqlite_file import Kind, open_database, os_problem

SCHEMA_VERSION = 1
APPLICATION_ID = 0x45524E44  # 'ERND'
BUSY_TIMEOUT_MS = 10_000
REBUILD_WAIT_MS = 600_000
CACHE_KB = 16_384  # SQLite's page cache per connection (the default 2 MB misses on every chunk lookup at 100k)
MMAP_BYTES = 256 << 20  # read through the OS page cache, shared by all workers

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    owner TEXT,
    conversation TEXT,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    kind TEXT NOT NULL,
    pages INTEGER,
    added_at TEXT NOT NULL,
    chunks INTEGER NOT NULL
);
CREATE UNIQUE INDEX documents_key ON documents (collection, coalesce(owner, x'00'), coalesce(conversation, x'00'), name);
CREATE INDEX documents_owner ON documents (owner, conversation);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id INTEGER NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    section INTEGER NOT NULL,
    page INTEGER,
    heading TEXT NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL
);
CREATE INDEX chunks_doc ON chunks (doc_id, ord);
CREATE TABLE texts (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5 (tokens, tokenize = 'unicode61 remove_diacritics 2');
CREATE TABLE terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 1), passages INTEGER NOT NULL);
INSERT INTO totals VALUES (1, 0);
CREATE TRIGGER chunks_delete AFTER DELETE ON chunks BEGIN DELETE FROM fts WHERE rowid = old.id; DELETE FROM texts WHERE id = old.id; END;
CREATE TRIGGER documents_insert AFTER INSERT ON documents BEGIN UPDATE totals SET passages = passages + new.chunks; END;
CREATE TRIGGER documents_delete AFTER DELETE ON documents BEGIN UPDATE totals SET passages = passages - old.chunks; END;
"""


class StoreError(ErnieOpsError):
    """The document index cannot be opened or written: one sentence naming the file and what to do."""


KIND = Kind(
    name="document index", a_name="a document index", schema="index schema", error=StoreError,
    application_id=APPLICATION_ID, version=SCHEMA_VERSION, elsewhere="point the index at another file",
    upgrade="upgrade ernie-ops on this host or point the index at another file", local_disk="put the index on a local disk",
    fresh="started an empty index: add the documents again",
)  # fmt: skip
PRAGMAS = ("PRAGMA foreign_keys = ON", f"PRAGMA cache_size = -{CACHE_KB}", f"PRAGMA mmap_size = {MMAP_BYTES}")

# the files this process has quick_check'ed, as they were then: a file that has not changed since is not read
# whole again (the chat app opens the index per question; quick_check reads every page: ~1 s at 100k passages)
CHECKED: set[tuple[int, int, int, int]] = set()
_CHECKED_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple[int, int, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class IndexFile:
    """One connection to the index file, shared by the threads of one process (`lock`); `meta` is written into a file
    created here (the tokenizer the passages are tokenised with, and the like)."""

    def __init__(self, path: Path, meta: dict[str, str]):
        self.path = path
        self.warnings: list[str] = []
        self.lock = threading.RLock()
        self._meta_at_create = meta
        self._vec_loaded = False
        self._checked_key = (0, 0, 0, 0)
        try:
            self.conn = self._open()
        except OSError as exc:
            raise StoreError(
                f"cannot open the document index {path}: {os_problem(exc, 'the index', 'point the index at another directory')}"
            ) from None

    def _open(self) -> sqlite3.Connection:
        """sqlite_file.open_database; an unchanged file already quick_check'ed by this process is not read whole again."""
        with _CHECKED_LOCK:
            checked = _file_key(self.path) in CHECKED if self.path.exists() else False
        seen = len(self.warnings)
        conn = open_database(
            self.path, KIND, create=self._create, pragmas=PRAGMAS, busy_timeout_ms=BUSY_TIMEOUT_MS, busy=self.busy,
            warnings=self.warnings, check=not checked,
        )  # fmt: skip
        if len(self.warnings) == seen:  # sound (a file just kept aside is checked again at the next open)
            with _CHECKED_LOCK:
                self._checked_key = _file_key(self.path)
                CHECKED.add(self._checked_key)
        return conn

    def _create(self, conn: sqlite3.Connection) -> None:
        # one statement at a time: executescript() would COMMIT the caller's transaction
        for stmt in SCHEMA.split(";\n"):
            if stmt.strip():
                conn.execute(stmt)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", self._meta_at_create.items())

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    def busy(self) -> StoreError:
        return StoreError(
            f"the document index {self.path} is busy: another process has been writing it for over {BUSY_TIMEOUT_MS // 1000} s; try again"
        )

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def dimension(self) -> int | None:
        """Of the dense vectors; None while the index holds none."""
        value = self.meta("dimension")
        return int(value) if value else None

    @contextlib.contextmanager
    def patient(self) -> Iterator[None]:
        """Wait up to REBUILD_WAIT_MS for another writer (a rebuild of every passage takes that long at worst)."""
        self.conn.execute(f"PRAGMA busy_timeout = {REBUILD_WAIT_MS}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    # ---- transactions --------------------------------------------------------------------------
    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise self.busy() from None
                raise
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException as exc:
                self.conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise self.busy() from None
                if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
                    raise StoreError(f"the document index {self.path} cannot grow: {exc}; free space on its file system") from None
                if isinstance(exc, sqlite3.DatabaseError):
                    raise self._damaged(exc) from None
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot for the statements inside)."""
        with self.lock:
            if self.conn.in_transaction:  # nested (search_dense inside its lock): the outer one holds the snapshot
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    raise self._damaged(exc) from None
                raise
            self.conn.execute("COMMIT")

    def _damaged(self, exc: sqlite3.DatabaseError) -> Exception:
        """SQLite found damage while in use: the next open checks the file again (and keeps it aside)."""
        if not any(word in str(exc) for word in ("malformed", "not a database", "corrupt")):
            return exc
        with _CHECKED_LOCK:
            CHECKED.discard(self._checked_key)
        return StoreError(
            f"the document index {self.path} is damaged ({exc}); the next time it is opened it is kept aside as "
            f"{self.path.name}.corrupt-<UTC time> and an empty index started: then add the documents again"
        )

    # ---- vectors -------------------------------------------------------------------------------
    def load_vec(self) -> None:
        """sqlite-vec into this connection (once); a sentence saying what to install when this Python cannot."""
        if self._vec_loaded:
            return
        try:
            import sqlite_vec

            self.conn.enable_load_extension(True)
            try:
                sqlite_vec.load(self.conn)
            finally:
                self.conn.enable_load_extension(False)
        except (ImportError, AttributeError, sqlite3.OperationalError) as exc:
            raise StoreError(
                f"dense vectors need the sqlite-vec extension, which this Python cannot load ({exc}); "
                "install sqlite-vec in a Python whose sqlite3 allows extensions, or turn embeddings off"
            ) from None
        self._vec_loaded = True


def vector_blob(vector: Sequence[float], dim: int, what: str) -> bytes:
    """A vector as the `vec` table stores it; a sentence naming `what` when it does not fit the index's vectors."""
    if len(vector) != dim:
        raise StoreError(f"{what} has {len(vector)} dimensions but the index holds {dim}-dimensional vectors; use the same embedding model")
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in vector):
        raise StoreError(f"{what} holds a value that is not a finite number; check the embedding model's output")
    return struct.pack(f"{dim}f", *vector)


def with_vectors(conn: sqlite3.Connection, doc_id: int) -> set[int]:
    """The document's passages that have a vector (the vec table exists and sqlite-vec is loaded)."""
    return {r[0] for r in conn.execute("SELECT c.id FROM chunks c JOIN vec v ON v.chunk_id = c.id WHERE c.doc_id = ?", (doc_id,))}
