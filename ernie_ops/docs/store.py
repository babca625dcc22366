"""The document index as its callers use it: `Index` over one SQLite file, its jobs in their own modules: the file
(`index_file.py`: schema, opening, one writer at a time, damage kept aside), writing (`index_write.py`: documents,
vectors, removal, re-tokenising when the tokenizer changes), searching (`index_search.py`: BM25 within a postings
budget, nearest vectors), what a search may see (`scope.py`); here the listings for the operator and the CLI. Why each
choice, and the measurements: docs/design/document-index.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ernie_ops.docs import index_search, index_write, terms
from ernie_ops.docs import scope as scopes
from ernie_ops.docs.index_file import IndexFile, StoreError
from ernie_ops.docs.model import Chunk, Hit
from ernie_ops.docs.scope import Scope
from ernie_ops.errors import ErnieOpsError

__all__ = ["Collection", "Document", "Index", "Scope", "Stats", "StoreError", "open_index"]

DEFAULT_TOKENIZER = "bigram"


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


_DOC_COLS = "id, collection, owner, conversation, name, sha256, size, kind, pages, added_at, chunks"


class Index:
    """The document index in one SQLite file (the module docstring names where each job lives). One connection,
    guarded by the file's thread lock: the chat app calls it from worker threads."""

    def __init__(self, path: str | Path, *, tokenizer: str = DEFAULT_TOKENIZER):
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.file = IndexFile(self.path, {"tokenizer": tokenizer, "token_source": terms.token_source_name()})
        try:
            index_write.retokenize(self.file, tokenizer)
        except BaseException:
            self.file.close()
            raise

    @property
    def warnings(self) -> list[str]:
        """Sentences for the operator from opening the file (a damaged one kept aside)."""
        return self.file.warnings

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing (index_write) -----------------------------------------------------------------
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
        """Store a document and its passages (`index_write.add`: a document of the same name and scope replaced)."""
        return index_write.add(
            self.file, self.tokenizer, name, sha256, size, kind, chunks,
            collection=collection, owner=owner, conversation=conversation, pages=pages, vectors=vectors,
        )  # fmt: skip

    def missing_vectors(self, doc_id: int) -> list[tuple[int, str]]:
        return index_write.missing_vectors(self.file, doc_id)

    def add_vectors(self, doc_id: int, pairs: Sequence[tuple[int, Sequence[float]]]) -> int:
        return index_write.add_vectors(self.file, doc_id, pairs)

    def remove(self, doc_id: int) -> bool:
        return index_write.remove(self.file, doc_id)

    def remove_conversation(self, owner: str, conversation: str | None) -> int:
        return index_write.remove_conversation(self.file, owner, conversation)

    # ---- searching (index_search) --------------------------------------------------------------
    def search(self, question: str, scope: Scope, k: int = 5) -> list[Hit]:
        return index_search.search(self.file, self.tokenizer, question, scope, k)

    def search_dense(self, vector: Sequence[float], scope: Scope, k: int = 5) -> list[Hit]:
        return index_search.search_dense(self.file, vector, scope, k)

    # ---- listing -------------------------------------------------------------------------------
    def documents(self, scope: Scope | None = None) -> list[Document]:
        """Every document (scope None: for the operator), or those a scope may see; by collection and name."""
        where, params = scopes.where(scope) if scope is not None else ("1", [])
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


def open_index(index_file: str, tokenizer: str) -> Index:
    """The index at `index_file`, its directory created first (0700); a directory that cannot be made is a sentence
    naming the file, not a traceback. The chat app and the CLI both open it here (the CLI as the file's owner)."""
    try:
        Path(index_file).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ErnieOpsError(f"cannot create the directory of chat.docs.index_file {index_file}: {exc.strerror or exc}") from None
    return Index(index_file, tokenizer=tokenizer)
