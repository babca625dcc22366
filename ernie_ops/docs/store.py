"""The document index: documents, their passages, an FTS5 index over the passages' CJK-aware token text (BM25) and
optionally dense vectors (sqlite-vec), in one SQLite file (`index_file.py`: opening, one writer at a time, damage);
the tokenizer recorded and the token column rebuilt when it changes (`terms.py`: what that column holds); search
bounded by a postings budget. Why each choice, and the measurements: docs/design/document-index.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.docs import terms, tokens
from ernie_ops.docs.index_file import IndexFile, StoreError
from ernie_ops.docs.model import Chunk, Hit
from ernie_ops.errors import ErnieOpsError

__all__ = ["Collection", "Document", "Index", "Scope", "Stats", "StoreError", "open_index"]

DEFAULT_TOKENIZER = "bigram"
MAX_QUERY_TERMS = 16
POSTINGS_BUDGET = 3_000  # rows a query may rank: BM25 + the scope join cost 2-4 us of CPU per matching row here


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


_DOC_COLS = "id, collection, owner, conversation, name, sha256, size, kind, pages, added_at, chunks"
_HIT_COLS = 'c.id, c.doc_id, d.collection, d.name, (SELECT text FROM texts WHERE id = c.id), c.page, c.heading, c.start, c."end"'


class Index:
    """The document index in one SQLite file; see the module docstring for the rules it keeps."""

    def __init__(self, path: str | Path, *, tokenizer: str = DEFAULT_TOKENIZER):
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.file = IndexFile(self.path, {"tokenizer": tokenizer, "token_source": terms.token_source_name()})
        try:
            self._ensure_tokenizer()
        except BaseException:
            self.file.close()
            raise

    @property
    def warnings(self) -> list[str]:
        """Sentences for the operator from opening the file (a damaged one kept aside)."""
        return self.file.warnings

    def _ensure_tokenizer(self) -> None:
        """Re-tokenise every passage when the index was built with another tokenizer or token source (see module doc)."""
        source, meta = terms.token_source_name(), self.file.meta
        if meta("tokenizer") == self.tokenizer and meta("token_source") == source:
            return
        if self.tokenizer not in tokens.TOKENIZERS:
            raise StoreError(f"unknown tokenizer {self.tokenizer!r} for the document index; use one of {', '.join(tokens.TOKENIZERS)}")
        with self.file.patient(), self.file.write() as conn:
            if meta("tokenizer") == self.tokenizer and meta("token_source") == source:
                return
            conn.execute("DELETE FROM fts")
            conn.execute("DELETE FROM terms")
            rows = conn.execute("SELECT t.id, t.text, c.heading FROM texts t JOIN chunks c ON c.id = t.id").fetchall()
            indexed = [
                (cid, tokens.index_text(terms.token_source(text, json.loads(heading)), self.tokenizer)) for cid, text, heading in rows
            ]
            conn.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", indexed)
            terms.adjust(conn, terms.counts(t for _, t in indexed), +1)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('tokenizer', ?)", (self.tokenizer,))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('token_source', ?)", (source,))

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _forget(self, conn: sqlite3.Connection, where: str, params: Sequence) -> None:
        """Before documents (`where` over documents d) are deleted: their terms' counts and their vectors
        (passages, texts and FTS rows go by the cascade and the trigger)."""
        gone = conn.execute(
            f"SELECT f.tokens FROM documents d JOIN chunks c ON c.doc_id = d.id JOIN fts f ON f.rowid = c.id WHERE {where}", params
        )
        terms.adjust(conn, terms.counts(r[0] for r in gone), -1)
        if self.file.dimension() is None:
            return
        self.file.load_vec()
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
        token_texts = [
            tokens.index_text(terms.token_source(c.text, c.heading), self.tokenizer) for c in chunks
        ]  # before the lock: the slow part
        counts = terms.counts(token_texts)
        added_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if vectors is not None:
            self.file.load_vec()
        with self.file.write() as conn:
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
            terms.adjust(conn, counts, +1)
            if vectors is not None and vectors:
                scope = f"s:{collection}" if owner is None else _private_key(owner, conversation)
                self._insert_vectors(conn, name, scope, list(zip(ids, vectors, strict=True)))
            return doc_id

    def _insert_vectors(self, conn: sqlite3.Connection, name: str, scope: str, pairs: Sequence[tuple[int, Sequence[float]]]) -> None:
        """Store (chunk id, vector) pairs of one document (its vec `scope`); the vec table is created at the first."""
        dim = self.file.dimension()
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
        with self.file.lock:
            dense = self.file.dimension() is not None
            if dense:
                self.file.load_vec()
            with self.file.read() as conn:
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
        self.file.load_vec()
        with self.file.write() as conn:
            row = conn.execute("SELECT name, collection, owner, conversation FROM documents WHERE id = ?", (doc_id,)).fetchone()
            if row is None:
                return 0
            name, collection, owner, conversation = row
            alive = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))}
            if self.file.dimension() is not None:
                alive -= _with_vectors(conn, doc_id)
            todo = [(cid, v) for cid, v in pairs if cid in alive]
            if todo:
                scope = f"s:{collection}" if owner is None else _private_key(owner, conversation)
                self._insert_vectors(conn, name, scope, todo)
            return len(todo)

    def remove(self, doc_id: int) -> bool:
        """Remove a document with its passages, FTS rows and vectors; False if there was none."""
        with self.file.write() as conn:
            self._forget(conn, "d.id = ?", (doc_id,))
            return conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount > 0

    def remove_conversation(self, owner: str, conversation: str | None) -> int:
        """Remove a chat's uploads (the documents of exactly that owner and conversation); how many."""
        where, params = "d.owner = ? AND d.conversation IS ?", (owner, conversation)
        with self.file.write() as conn:
            self._forget(conn, where, params)
            return conn.execute(f"DELETE FROM documents AS d WHERE {where}", params).rowcount

    # ---- reading -------------------------------------------------------------------------------
    def documents(self, scope: Scope | None = None) -> list[Document]:
        """Every document (scope None: for the operator), or those a scope may see; by collection and name."""
        where, params = _scope_sql(scope) if scope is not None else ("1", [])
        with self.file.read():
            rows = self.file.conn.execute(
                f"SELECT {_DOC_COLS} FROM documents d WHERE {where} ORDER BY collection, owner IS NOT NULL, owner, conversation, name, id",
                params,
            ).fetchall()
        return [Document(*r) for r in rows]

    def find(self, name: str, collection: str = "default", owner: str | None = None, conversation: str | None = None) -> Document | None:
        with self.file.read():
            row = self.file.conn.execute(
                f"SELECT {_DOC_COLS} FROM documents WHERE collection = ? AND owner IS ? AND conversation IS ? AND name = ?",
                (collection, owner, conversation, name),
            ).fetchone()
        return Document(*row) if row else None

    def collections(self) -> list[Collection]:
        """The shared collections (documents with no owner) with their document and passage counts."""
        with self.file.read():
            rows = self.file.conn.execute(
                "SELECT collection, count(*), coalesce(sum(chunks), 0) FROM documents WHERE owner IS NULL "
                "GROUP BY collection ORDER BY collection"
            ).fetchall()
        return [Collection(*r) for r in rows]

    def stats(self) -> Stats:
        with self.file.read():
            docs, chunks = self.file.conn.execute("SELECT count(*), coalesce(sum(chunks), 0) FROM documents").fetchone()
            tokenizer = self.file.meta("tokenizer") or self.tokenizer
            dim = self.file.dimension()
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
        asked = list(dict.fromkeys(t for t in tokens.query_terms(question, self.tokenizer) if t))
        if not asked or k < 1:
            return []
        where, params = _scope_sql(scope)
        with self.file.read() as conn:
            n = conn.execute("SELECT passages FROM totals").fetchone()[0]
            if n == 0:
                return []
            folded = {t: terms.fold(t) for t in asked}
            keys = sorted(set(folded.values()))
            known = dict(conn.execute(f"SELECT term, df FROM terms WHERE term IN ({','.join('?' * len(keys))})", keys).fetchall())
            df = {t: known.get(folded[t], 0) for t in asked}
            idf = {t: terms.idf(df[t], n) for t in asked}
            present = sorted((t for t in asked if df[t] > 0), key=lambda t: (df[t], asked.index(t)))[:MAX_QUERY_TERMS]
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
                ranked = self._ranked(conn, " AND ".join(f"({tokens.fts_match([t])})" for t in present[:3]), where, params, k)
            if not ranked:
                ranked = self._ranked(conn, tokens.fts_match(kept), where, params, k)
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
            skip = terms.heading_token_count(tuple(json.loads(details[cid][6])), self.tokenizer)
            has = set(terms.fold(indexed.get(cid, "")).split()[skip:])
            coverage = sum(idf[t] for t in asked if folded[t] in has) / total if total else 0.0
            hits.append(replace(self._hit(details[cid], -bm25, "lexical", rank), coverage=coverage))
        return hits

    def search_dense(self, vector: Sequence[float], scope: Scope, k: int = 5) -> list[Hit]:
        """The k passages the scope may see nearest the vector (cosine); [] when the index holds no vectors."""
        if k < 1:
            return []
        with self.file.lock:
            dim = self.file.dimension()
            if dim is None:
                return []
            self.file.load_vec()
            blob = _vec_blob(vector, dim, "the question's vector")
            with self.file.read() as conn:
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
