"""The document index: one SQLite file holding documents, their passages, an FTS5 index over the passages'
CJK-aware token text (BM25), and optionally dense vectors (sqlite-vec). Concurrent writers one at a time (WAL,
`BEGIN IMMEDIATE`); a damaged file kept aside, never one we cannot recognise; the tokenizer recorded and the token
column rebuilt when it changes; search bounded by a postings budget. Why each choice, and the measurements:
docs/design/document-index.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sqlite3
import struct
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.docs import tokens
from ernie_ops.docs.model import Chunk, Hit
from ernie_ops.errors import ErnieOpsError
from ernie_ops.files.sqlite_file import Kind, open_database, os_problem

DEFAULT_TOKENIZER = "bigram"
SCHEMA_VERSION = 1
APPLICATION_ID = 0x45524E44  # 'ERND'
BUSY_TIMEOUT_MS = 10_000
REBUILD_WAIT_MS = 600_000
MAX_QUERY_TERMS = 16
CACHE_KB = 16_384  # SQLite's page cache per connection (the default 2 MB misses on every chunk lookup at 100k)
MMAP_BYTES = 256 << 20  # read through the OS page cache, shared by all workers
POSTINGS_BUDGET = 3_000  # rows a query may rank: BM25 + the scope join cost 2-4 us of CPU per matching row here
TOKEN_SOURCE = "heading+passage"  # what the token column is made of (meta 'token_source'); another value: rebuilt
INDEX_HEADINGS = True  # the heading path goes into the token column (False: the passage alone; a bench experiment)

_SCHEMA = """
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


_KIND = Kind(
    name="document index", a_name="a document index", schema="index schema", error=StoreError,
    application_id=APPLICATION_ID, version=SCHEMA_VERSION, elsewhere="point the index at another file",
    upgrade="upgrade ernie-ops on this host or point the index at another file", local_disk="put the index on a local disk",
    fresh="started an empty index: add the documents again",
)  # fmt: skip
_PRAGMAS = ("PRAGMA foreign_keys = ON", f"PRAGMA cache_size = -{CACHE_KB}", f"PRAGMA mmap_size = {MMAP_BYTES}")


@dataclass(frozen=True)
class Scope:
    """What a search may see: shared documents (owner NULL) in `collections` (None = every collection),
    plus the private documents of exactly `owner` and `conversation` (none when owner is None)."""

    collections: list[str] | None = None
    owner: str | None = None
    conversation: str | None = None


@dataclass(frozen=True)
class Document:
    doc_id: int
    collection: str
    owner: str | None
    conversation: str | None
    name: str
    sha256: str
    size: int
    kind: str
    pages: int | None
    added_at: str
    chunks: int


@dataclass(frozen=True)
class Collection:
    name: str
    documents: int
    chunks: int


@dataclass(frozen=True)
class Stats:
    documents: int
    chunks: int
    bytes: int  # the database file plus its WAL
    tokenizer: str
    dimension: int | None  # of the dense vectors, None when there are none


def _token_source_name() -> str:
    return TOKEN_SOURCE if INDEX_HEADINGS else "passage"


@functools.lru_cache(maxsize=4096)
def _heading_token_count(heading: tuple[str, ...], tokenizer: str) -> int:
    """How many tokens token_source() puts in front of the passage's own: its heading path's. The path and the text
    are apart (a newline ends every token and CJK run), so the column's tokens are the path's, then the text's."""
    if not INDEX_HEADINGS or not heading:
        return 0
    return len(tokens.tokenize(" > ".join(heading), tokenizer))


def token_source(text: str, heading: Sequence[str]) -> str:
    """What the token column indexes for a passage: its heading path (e.g. 部署 > 升级), a newline, its text."""
    if not INDEX_HEADINGS or not heading:
        return text
    return " > ".join(heading) + "\n" + text


def _os_error(path: Path, exc: OSError, doing: str) -> StoreError:
    return StoreError(f"cannot {doing} the document index {path}: {os_problem(exc, 'the index', 'point the index at another directory')}")


# the files this process has quick_check'ed, as they were then: a file that has not changed since is not read
# whole again (the chat app opens the index per question; quick_check reads every page: ~1 s at 100k passages)
_CHECKED: set[tuple[int, int, int, int]] = set()
_CHECKED_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple[int, int, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _vec_blob(vector: Sequence[float], dim: int, what: str) -> bytes:
    if len(vector) != dim:
        raise StoreError(f"{what} has {len(vector)} dimensions but the index holds {dim}-dimensional vectors; use the same embedding model")
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in vector):
        raise StoreError(f"{what} holds a value that is not a finite number; check the embedding model's output")
    return struct.pack(f"{dim}f", *vector)


def _scope_keys(scope: Scope, collections: list[str]) -> list[str]:
    keys = [f"s:{c}" for c in (collections if scope.collections is None else scope.collections)]
    if scope.owner is not None:
        keys.append(_private_key(scope.owner, scope.conversation))
    return keys


def _private_key(owner: str, conversation: str | None) -> str:
    return "p:" + json.dumps([owner, conversation], ensure_ascii=False)


def _scope_sql(scope: Scope) -> tuple[str, list]:
    """The WHERE fragment (over documents aliased d) for a scope, and its parameters."""
    parts, params = [], []
    if scope.collections is None:
        parts.append("d.owner IS NULL")
    elif scope.collections:
        parts.append(f"(d.owner IS NULL AND d.collection IN ({','.join('?' * len(scope.collections))}))")
        params += list(scope.collections)
    if scope.owner is not None:
        parts.append("(d.owner = ? AND d.conversation IS ?)")
        params += [scope.owner, scope.conversation]
    return ("(" + " OR ".join(parts) + ")" if parts else "0"), params


def _with_vectors(conn: sqlite3.Connection, doc_id: int) -> set[int]:
    """The document's passages that have a vector (the vec table exists and sqlite-vec is loaded)."""
    return {r[0] for r in conn.execute("SELECT c.id FROM chunks c JOIN vec v ON v.chunk_id = c.id WHERE c.doc_id = ?", (doc_id,))}


def _fold(text: str) -> str:
    """Case and diacritics folded as FTS5's unicode61 (remove_diacritics 2) does, near enough to compare tokens."""
    text = text.casefold()
    if text.isascii():
        return text
    split = unicodedata.normalize("NFKD", text)
    if len(split) == len(text):  # nothing decomposed (CJK, or tokens.py's NFKC output without accents): no marks to drop
        return text
    return "".join(ch for ch in split if not unicodedata.combining(ch))


def _term_counts(token_texts: Iterable[str]) -> Counter[str]:
    """In how many of these passages each (folded) token occurs."""
    counts: Counter[str] = Counter()
    for text in token_texts:
        counts.update(set(_fold(text).split()))
    return counts


def _adjust_terms(conn: sqlite3.Connection, counts: Counter[str], sign: int) -> None:
    """Add (sign +1) or take away (-1) passages' term counts in `terms`, the document frequencies search reads."""
    if sign > 0:
        # in key order: each B-tree page is visited once, not once per term (a 2x difference at 100k passages)
        conn.executemany("INSERT INTO terms VALUES (?, ?) ON CONFLICT (term) DO UPDATE SET df = df + excluded.df", sorted(counts.items()))
    else:
        conn.executemany("UPDATE terms SET df = df - ? WHERE term = ?", ((n, t) for t, n in sorted(counts.items())))
        conn.executemany("DELETE FROM terms WHERE term = ? AND df <= 0", ((t,) for t in counts))


def _idf(df: int, n: int) -> float:
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


_DOC_COLS = "id, collection, owner, conversation, name, sha256, size, kind, pages, added_at, chunks"
_HIT_COLS = 'c.id, c.doc_id, d.collection, d.name, (SELECT text FROM texts WHERE id = c.id), c.page, c.heading, c.start, c."end"'


class Index:
    """The document index in one SQLite file; see the module docstring for the rules it keeps."""

    def __init__(self, path: str | Path, *, tokenizer: str = DEFAULT_TOKENIZER):
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.warnings: list[str] = []
        self._lock = threading.RLock()
        self._vec_loaded = False
        self._checked_key = (0, 0, 0, 0)
        try:
            self._conn = self._open()
        except OSError as exc:
            raise _os_error(self.path, exc, "open") from None
        try:
            self._ensure_tokenizer()
        except BaseException:
            self._conn.close()
            raise

    # ---- opening -------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        """sqlite_file.open_database; an unchanged file already quick_check'ed by this process is not read whole again."""
        with _CHECKED_LOCK:
            checked = _file_key(self.path) in _CHECKED if self.path.exists() else False
        seen = len(self.warnings)
        conn = open_database(
            self.path, _KIND, create=self._create, pragmas=_PRAGMAS, busy_timeout_ms=BUSY_TIMEOUT_MS, busy=self._busy,
            warnings=self.warnings, check=not checked,
        )  # fmt: skip
        if len(self.warnings) == seen:  # sound (a file just kept aside is checked again at the next open)
            with _CHECKED_LOCK:
                self._checked_key = _file_key(self.path)
                _CHECKED.add(self._checked_key)
        return conn

    def _create(self, conn: sqlite3.Connection) -> None:
        # one statement at a time: executescript() would COMMIT the caller's transaction
        for stmt in _SCHEMA.split(";\n"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute("INSERT INTO meta VALUES ('tokenizer', ?)", (self.tokenizer,))
        conn.execute("INSERT INTO meta VALUES ('token_source', ?)", (_token_source_name(),))

    def _busy(self) -> StoreError:
        return StoreError(
            f"the document index {self.path} is busy: another process has been writing it for over {BUSY_TIMEOUT_MS // 1000} s; try again"
        )

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _ensure_tokenizer(self) -> None:
        """Re-tokenise every passage when the index was built with another tokenizer or token source (see module doc)."""
        source = _token_source_name()
        if self._meta("tokenizer") == self.tokenizer and self._meta("token_source") == source:
            return
        tok = tokens
        if self.tokenizer not in tok.TOKENIZERS:
            raise StoreError(f"unknown tokenizer {self.tokenizer!r} for the document index; use one of {', '.join(tok.TOKENIZERS)}")
        self._conn.execute(f"PRAGMA busy_timeout = {REBUILD_WAIT_MS}")
        try:
            with self._write():
                if self._meta("tokenizer") == self.tokenizer and self._meta("token_source") == source:
                    return
                self._conn.execute("DELETE FROM fts")
                self._conn.execute("DELETE FROM terms")
                rows = self._conn.execute("SELECT t.id, t.text, c.heading FROM texts t JOIN chunks c ON c.id = t.id").fetchall()
                indexed = [(cid, tok.index_text(token_source(text, json.loads(heading)), self.tokenizer)) for cid, text, heading in rows]
                self._conn.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", indexed)
                _adjust_terms(self._conn, _term_counts(t for _, t in indexed), +1)
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('tokenizer', ?)", (self.tokenizer,))
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('token_source', ?)", (source,))
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- transactions --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise self._busy() from None
                raise
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise self._busy() from None
                if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
                    raise StoreError(f"the document index {self.path} cannot grow: {exc}; free space on its file system") from None
                if isinstance(exc, sqlite3.DatabaseError):
                    raise self._damaged(exc) from None
                raise

    def _damaged(self, exc: sqlite3.DatabaseError) -> Exception:
        """SQLite found damage while in use: the next open checks the file again (and keeps it aside)."""
        if not any(word in str(exc) for word in ("malformed", "not a database", "corrupt")):
            return exc
        with _CHECKED_LOCK:
            _CHECKED.discard(self._checked_key)
        return StoreError(
            f"the document index {self.path} is damaged ({exc}); the next time it is opened it is kept aside as "
            f"{self.path.name}.corrupt-<UTC time> and an empty index started: then add the documents again"
        )

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot for the statements inside)."""
        with self._lock:
            if self._conn.in_transaction:  # nested (search_dense inside its lock): the outer one holds the snapshot
                yield self._conn
                return
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    raise self._damaged(exc) from None
                raise
            self._conn.execute("COMMIT")

    # ---- vectors -------------------------------------------------------------------------------
    def _load_vec(self) -> None:
        if self._vec_loaded:
            return
        try:
            import sqlite_vec

            self._conn.enable_load_extension(True)
            try:
                sqlite_vec.load(self._conn)
            finally:
                self._conn.enable_load_extension(False)
        except (ImportError, AttributeError, sqlite3.OperationalError) as exc:
            raise StoreError(
                f"dense vectors need the sqlite-vec extension, which this Python cannot load ({exc}); "
                "install sqlite-vec in a Python whose sqlite3 allows extensions, or turn embeddings off"
            ) from None
        self._vec_loaded = True

    def _dimension(self) -> int | None:
        value = self._meta("dimension")
        return int(value) if value else None

    def _forget(self, conn: sqlite3.Connection, where: str, params: Sequence) -> None:
        """Before documents (`where` over documents d) are deleted: their terms' counts and their vectors
        (passages, texts and FTS rows go by the cascade and the trigger)."""
        gone = conn.execute(
            f"SELECT f.tokens FROM documents d JOIN chunks c ON c.doc_id = d.id JOIN fts f ON f.rowid = c.id WHERE {where}", params
        )
        _adjust_terms(conn, _term_counts(r[0] for r in gone), -1)
        if self._dimension() is None:
            return
        self._load_vec()
        conn.execute(
            f"DELETE FROM vec WHERE chunk_id IN (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE {where})", params
        )

    # ---- writing -------------------------------------------------------------------------------
    def add(
        self,
        name: str,
        sha256: str,
        size: int,
        kind: str,
        chunks: Sequence[Chunk],
        *,
        collection: str = "default",
        owner: str | None = None,
        conversation: str | None = None,
        pages: int | None = None,
        vectors: Sequence[Sequence[float]] | None = None,
    ) -> int:
        """Store a document and its passages; the id. A document of the same name in the same collection,
        owner and conversation is replaced in the same transaction (old rows gone and new rows in, or nothing changed)."""
        if owner is None and conversation is not None:
            raise StoreError(f"{name}: a conversation's document needs its owner; pass owner= as well")
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{name}: {len(vectors)} vectors for {len(chunks)} passages; embed every passage once")
        tok = tokens
        token_texts = [tok.index_text(token_source(c.text, c.heading), self.tokenizer) for c in chunks]  # before the lock: the slow part
        counts = _term_counts(token_texts)
        added_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if vectors is not None:
            self._load_vec()
        with self._write() as conn:
            key = "d.collection = ? AND d.owner IS ? AND d.conversation IS ? AND d.name = ?"
            kp = (collection, owner, conversation, name)
            self._forget(conn, key, kp)
            conn.execute(f"DELETE FROM documents AS d WHERE {key}", kp)
            doc_id = conn.execute(
                "INSERT INTO documents (collection, owner, conversation, name, sha256, size, kind, pages, added_at, chunks) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (collection, owner, conversation, name, sha256, size, kind, pages, added_at, len(chunks)),
            ).lastrowid
            ids = []
            for ord_, c in enumerate(chunks):
                ids.append(
                    conn.execute(
                        'INSERT INTO chunks (doc_id, ord, section, page, heading, start, "end") VALUES (?, ?, ?, ?, ?, ?, ?)',
                        (doc_id, ord_, c.section, c.page, json.dumps(list(c.heading), ensure_ascii=False), c.start, c.end),
                    ).lastrowid
                )
            conn.executemany("INSERT INTO texts (id, text) VALUES (?, ?)", zip(ids, (c.text for c in chunks), strict=True))
            conn.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", zip(ids, token_texts, strict=True))
            _adjust_terms(conn, counts, +1)
            if vectors is not None and vectors:
                scope = f"s:{collection}" if owner is None else _private_key(owner, conversation)
                self._insert_vectors(conn, name, scope, list(zip(ids, vectors, strict=True)))
            return doc_id

    def _insert_vectors(self, conn: sqlite3.Connection, name: str, scope: str, pairs: Sequence[tuple[int, Sequence[float]]]) -> None:
        """Store (chunk id, vector) pairs of one document (its vec `scope`); the vec table is created at the first."""
        dim = self._dimension()
        if dim is None:
            dim = len(pairs[0][1])
            if dim < 1:
                raise StoreError(f"{name}: an empty vector; check the embedding model")
            conn.execute(
                "CREATE VIRTUAL TABLE vec USING vec0 "
                f"(chunk_id INTEGER PRIMARY KEY, scope TEXT, embedding float[{dim}] distance_metric=cosine)"
            )
            conn.execute("INSERT INTO meta VALUES ('dimension', ?)", (str(dim),))
        conn.executemany(
            "INSERT INTO vec (chunk_id, scope, embedding) VALUES (?, ?, ?)",
            ((cid, scope, _vec_blob(v, dim, f"{name}: vector {i + 1}")) for i, (cid, v) in enumerate(pairs)),
        )

    def missing_vectors(self, doc_id: int) -> list[tuple[int, str]]:
        """(chunk id, text) of the document's passages that have no vector, in document order (all of them while the
        index holds no vectors at all: embeddings were off when it was built)."""
        with self._lock:
            dense = self._dimension() is not None
            if dense:
                self._load_vec()
            with self._read() as conn:
                rows = conn.execute(
                    "SELECT c.id, t.text FROM chunks c JOIN texts t ON t.id = c.id WHERE c.doc_id = ? ORDER BY c.ord", (doc_id,)
                ).fetchall()
                if not dense or not rows:
                    return rows
                have = _with_vectors(conn, doc_id)
        return [r for r in rows if r[0] not in have]

    def add_vectors(self, doc_id: int, pairs: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Store vectors for passages of a document that lack one (a back-fill); how many were stored. Passages gone
        since (the document was replaced or removed meanwhile) or given a vector meanwhile are skipped."""
        if not pairs:
            return 0
        self._load_vec()
        with self._write() as conn:
            row = conn.execute("SELECT name, collection, owner, conversation FROM documents WHERE id = ?", (doc_id,)).fetchone()
            if row is None:
                return 0
            name, collection, owner, conversation = row
            alive = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))}
            if self._dimension() is not None:
                alive -= _with_vectors(conn, doc_id)
            todo = [(cid, v) for cid, v in pairs if cid in alive]
            if todo:
                scope = f"s:{collection}" if owner is None else _private_key(owner, conversation)
                self._insert_vectors(conn, name, scope, todo)
            return len(todo)

    def remove(self, doc_id: int) -> bool:
        """Remove a document with its passages, FTS rows and vectors; False if there was none."""
        with self._write() as conn:
            self._forget(conn, "d.id = ?", (doc_id,))
            return conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount > 0

    def remove_conversation(self, owner: str, conversation: str | None) -> int:
        """Remove a chat's uploads (the documents of exactly that owner and conversation); how many."""
        where, params = "d.owner = ? AND d.conversation IS ?", (owner, conversation)
        with self._write() as conn:
            self._forget(conn, where, params)
            return conn.execute(f"DELETE FROM documents AS d WHERE {where}", params).rowcount

    # ---- reading -------------------------------------------------------------------------------
    def documents(self, scope: Scope | None = None) -> list[Document]:
        """Every document (scope None: for the operator), or those a scope may see; by collection and name."""
        where, params = _scope_sql(scope) if scope is not None else ("1", [])
        with self._read():
            rows = self._conn.execute(
                f"SELECT {_DOC_COLS} FROM documents d WHERE {where} ORDER BY collection, owner IS NOT NULL, owner, conversation, name, id",
                params,
            ).fetchall()
        return [Document(*r) for r in rows]

    def find(self, name: str, collection: str = "default", owner: str | None = None, conversation: str | None = None) -> Document | None:
        with self._read():
            row = self._conn.execute(
                f"SELECT {_DOC_COLS} FROM documents WHERE collection = ? AND owner IS ? AND conversation IS ? AND name = ?",
                (collection, owner, conversation, name),
            ).fetchone()
        return Document(*row) if row else None

    def collections(self) -> list[Collection]:
        """The shared collections (documents with no owner) with their document and passage counts."""
        with self._read():
            rows = self._conn.execute(
                "SELECT collection, count(*), coalesce(sum(chunks), 0) FROM documents WHERE owner IS NULL "
                "GROUP BY collection ORDER BY collection"
            ).fetchall()
        return [Collection(*r) for r in rows]

    def stats(self) -> Stats:
        with self._read():
            docs, chunks = self._conn.execute("SELECT count(*), coalesce(sum(chunks), 0) FROM documents").fetchone()
            tokenizer = self._meta("tokenizer") or self.tokenizer
            dim = self._dimension()
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                size += self.path.with_name(self.path.name + suffix).stat().st_size
        return Stats(docs, chunks, size, tokenizer, dim)

    def _hit(self, row: tuple, score: float, rank_name: str, rank: int) -> Hit:
        cid, doc_id, collection, name, text, page, heading, start, end = row
        return Hit(cid, doc_id, collection, name, text, score, page, tuple(json.loads(heading)), start, end, {rank_name: rank})

    def _ranked(self, conn: sqlite3.Connection, match: str, where: str, params: list, k: int) -> list[tuple[int, float]]:
        """(chunk id, bm25) of the k best matches the scope may see: the scope is in the ranked query itself."""
        return conn.execute(
            "SELECT c.id, bm25(fts) FROM fts JOIN chunks c ON c.id = fts.rowid JOIN documents d ON d.id = c.doc_id "
            f"WHERE fts MATCH ? AND {where} ORDER BY bm25(fts) LIMIT ?",
            [match, *params, k],
        ).fetchall()

    def search(self, question: str, scope: Scope, k: int = 5) -> list[Hit]:
        """The k passages the scope may see that best match the question (BM25), with coverage filled."""
        tok = tokens
        terms = list(dict.fromkeys(t for t in tok.query_terms(question, self.tokenizer) if t))
        if not terms or k < 1:
            return []
        where, params = _scope_sql(scope)
        with self._read() as conn:
            n = conn.execute("SELECT passages FROM totals").fetchone()[0]
            if n == 0:
                return []
            folded = {t: _fold(t) for t in terms}
            keys = sorted(set(folded.values()))
            known = dict(conn.execute(f"SELECT term, df FROM terms WHERE term IN ({','.join('?' * len(keys))})", keys).fetchall())
            df = {t: known.get(folded[t], 0) for t in terms}
            idf = {t: _idf(df[t], n) for t in terms}
            present = sorted((t for t in terms if df[t] > 0), key=lambda t: (df[t], terms.index(t)))[:MAX_QUERY_TERMS]
            if not present:
                return []
            kept, walked = [], 0
            for t in present:  # rarest first, while their posting lists fit the budget
                if kept and walked + df[t] > POSTINGS_BUDGET:
                    break
                kept.append(t)
                walked += df[t]
            ranked = []
            if walked > POSTINGS_BUDGET and len(present) > 1:  # even the rarest term is everywhere: passages with all the rarest
                ranked = self._ranked(conn, " AND ".join(f"({tok.fts_match([t])})" for t in present[:3]), where, params, k)
            if not ranked:
                ranked = self._ranked(conn, tok.fts_match(kept), where, params, k)
            if not ranked:
                return []
            ids = [cid for cid, _ in ranked]
            marks = ",".join("?" * len(ids))
            details = {
                r[0]: r
                for r in conn.execute(f"SELECT {_HIT_COLS} FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE c.id IN ({marks})", ids)
            }
            indexed = dict(conn.execute(f"SELECT rowid, tokens FROM fts WHERE rowid IN ({marks})", ids).fetchall())
        total = sum(idf.values())
        hits = []
        for rank, (cid, bm25) in enumerate(ranked, 1):
            skip = _heading_token_count(tuple(json.loads(details[cid][6])), self.tokenizer)
            has = set(_fold(indexed.get(cid, "")).split()[skip:])
            coverage = sum(idf[t] for t in terms if folded[t] in has) / total if total else 0.0
            hits.append(replace(self._hit(details[cid], -bm25, "lexical", rank), coverage=coverage))
        return hits

    def search_dense(self, vector: Sequence[float], scope: Scope, k: int = 5) -> list[Hit]:
        """The k passages the scope may see nearest the vector (cosine); [] when the index holds no vectors."""
        if k < 1:
            return []
        with self._lock:
            dim = self._dimension()
            if dim is None:
                return []
            self._load_vec()
            blob = _vec_blob(vector, dim, "the question's vector")
            with self._read() as conn:
                shared = [r[0] for r in conn.execute("SELECT DISTINCT collection FROM documents WHERE owner IS NULL")]
                keys = _scope_keys(scope, shared)
                if not keys:
                    return []
                near = conn.execute(
                    "SELECT chunk_id, distance FROM vec WHERE embedding MATCH ? AND k = ? "
                    f"AND scope IN ({','.join('?' * len(keys))}) ORDER BY distance",
                    [blob, k, *keys],
                ).fetchall()
                if not near:
                    return []
                where, params = _scope_sql(scope)
                dist = dict(near)
                rows = conn.execute(
                    f"SELECT {_HIT_COLS} FROM chunks c JOIN documents d ON d.id = c.doc_id "
                    f"WHERE c.id IN ({','.join('?' * len(dist))}) AND {where}",
                    [*dist, *params],
                ).fetchall()
        rows.sort(key=lambda r: (dist[r[0]], r[0]))
        return [self._hit(r, 1.0 - dist[r[0]], "dense", rank) for rank, r in enumerate(rows, 1)]


def open_index(index_file: str, tokenizer: str) -> Index:
    """The index at `index_file`, its directory created first (0700); a directory that cannot be made is a sentence
    naming the file, not a traceback. The chat app and the CLI both open it here (the CLI as the file's owner)."""
    try:
        Path(index_file).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ErnieOpsError(f"cannot create the directory of chat.docs.index_file {index_file}: {exc.strerror or exc}") from None
    return Index(index_file, tokenizer=tokenizer)
