"""Writing the document index: a document and its passages in (replacing one of the same name and scope in the same
transaction), vectors back-filled, documents and a chat's uploads out, and every passage re-tokenised when the
tokenizer changed. Each write is one transaction of the file's single writer (`index_file.IndexFile.write`); the
term statistics move with the rows (`terms.py`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime

from ernie_ops.docs import scope, terms, tokens
from ernie_ops.docs.index_file import IndexFile, StoreError, vector_blob, with_vectors
from ernie_ops.docs.model import Chunk


def retokenize(file: IndexFile, tokenizer: str) -> None:
    """Re-tokenise every passage when the index was built with another tokenizer or token source; nothing otherwise."""
    source, meta = terms.token_source_name(), file.meta
    if meta("tokenizer") == tokenizer and meta("token_source") == source:
        return
    if tokenizer not in tokens.TOKENIZERS:
        raise StoreError(f"unknown tokenizer {tokenizer!r} for the document index; use one of {', '.join(tokens.TOKENIZERS)}")
    with file.patient(), file.write() as conn:
        if meta("tokenizer") == tokenizer and meta("token_source") == source:
            return
        conn.execute("DELETE FROM fts")
        conn.execute("DELETE FROM terms")
        rows = conn.execute("SELECT t.id, t.text, c.heading FROM texts t JOIN chunks c ON c.id = t.id").fetchall()
        indexed = [(cid, tokens.index_text(terms.token_source(text, json.loads(heading)), tokenizer)) for cid, text, heading in rows]
        conn.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", indexed)
        terms.adjust(conn, terms.counts(t for _, t in indexed), +1)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('tokenizer', ?)", (tokenizer,))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('token_source', ?)", (source,))


def add(
    file: IndexFile,
    tokenizer: str,
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
    token_texts = [tokens.index_text(terms.token_source(c.text, c.heading), tokenizer) for c in chunks]  # before the lock: the slow part
    counts = terms.counts(token_texts)
    added_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if vectors is not None:
        file.load_vec()
    with file.write() as conn:
        key = "d.collection = ? AND d.owner IS ? AND d.conversation IS ? AND d.name = ?"
        kp = (collection, owner, conversation, name)
        _forget(file, conn, key, kp)
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
        if vectors:
            _insert_vectors(file, conn, name, scope.vector_key(collection, owner, conversation), list(zip(ids, vectors, strict=True)))
        return doc_id


def missing_vectors(file: IndexFile, doc_id: int) -> list[tuple[int, str]]:
    """(chunk id, text) of the document's passages that have no vector, in document order (all of them while the
    index holds no vectors at all: embeddings were off when it was built)."""
    with file.lock:
        dense = file.dimension() is not None
        if dense:
            file.load_vec()
        with file.read() as conn:
            rows = conn.execute(
                "SELECT c.id, t.text FROM chunks c JOIN texts t ON t.id = c.id WHERE c.doc_id = ? ORDER BY c.ord", (doc_id,)
            ).fetchall()
            if not dense or not rows:
                return rows
            have = with_vectors(conn, doc_id)
    return [r for r in rows if r[0] not in have]


def add_vectors(file: IndexFile, doc_id: int, pairs: Sequence[tuple[int, Sequence[float]]]) -> int:
    """Store vectors for passages of a document that lack one (a back-fill); how many were stored. Passages gone
    since (the document was replaced or removed meanwhile) or given a vector meanwhile are skipped."""
    if not pairs:
        return 0
    file.load_vec()
    with file.write() as conn:
        row = conn.execute("SELECT name, collection, owner, conversation FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            return 0
        name, collection, owner, conversation = row
        alive = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))}
        if file.dimension() is not None:
            alive -= with_vectors(conn, doc_id)
        todo = [(cid, v) for cid, v in pairs if cid in alive]
        if todo:
            _insert_vectors(file, conn, name, scope.vector_key(collection, owner, conversation), todo)
        return len(todo)


def remove(file: IndexFile, doc_id: int) -> bool:
    """Remove a document with its passages, FTS rows and vectors; False if there was none."""
    with file.write() as conn:
        _forget(file, conn, "d.id = ?", (doc_id,))
        return conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount > 0


def remove_conversation(file: IndexFile, owner: str, conversation: str | None) -> int:
    """Remove a chat's uploads (the documents of exactly that owner and conversation); how many."""
    where, params = "d.owner = ? AND d.conversation IS ?", (owner, conversation)
    with file.write() as conn:
        _forget(file, conn, where, params)
        return conn.execute(f"DELETE FROM documents AS d WHERE {where}", params).rowcount


def _forget(file: IndexFile, conn: sqlite3.Connection, where: str, params: Sequence) -> None:
    """Before documents (`where` over documents d) are deleted: their terms' counts and their vectors
    (passages, texts and FTS rows go by the cascade and the trigger)."""
    gone = conn.execute(
        f"SELECT f.tokens FROM documents d JOIN chunks c ON c.doc_id = d.id JOIN fts f ON f.rowid = c.id WHERE {where}", params
    )
    terms.adjust(conn, terms.counts(r[0] for r in gone), -1)
    if file.dimension() is None:
        return
    file.load_vec()
    conn.execute(f"DELETE FROM vec WHERE chunk_id IN (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE {where})", params)


def _insert_vectors(file: IndexFile, conn: sqlite3.Connection, name: str, key: str, pairs: Sequence[tuple[int, Sequence[float]]]) -> None:
    """Store (chunk id, vector) pairs of one document (its vector scope `key`); the vec table is created at the first."""
    dim = file.dimension()
    if dim is None:
        dim = len(pairs[0][1])
        if dim < 1:
            raise StoreError(f"{name}: an empty vector; check the embedding model")
        conn.execute(
            f"CREATE VIRTUAL TABLE vec USING vec0 (chunk_id INTEGER PRIMARY KEY, scope TEXT, embedding float[{dim}] distance_metric=cosine)"
        )
        conn.execute("INSERT INTO meta VALUES ('dimension', ?)", (str(dim),))
    conn.executemany(
        "INSERT INTO vec (chunk_id, scope, embedding) VALUES (?, ?, ?)",
        ((cid, key, vector_blob(v, dim, f"{name}: vector {i + 1}")) for i, (cid, v) in enumerate(pairs)),
    )
