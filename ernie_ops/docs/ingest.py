"""A file into the index: name check, size check, isolated extraction, chunking, optional vectors, store.

The one path for every way in: the chat app's uploads (private to a user's conversation), the
operator's `ernie-ops docs add`, and `ernie-ops docs sync DIR` (the Ansible role's mirror of a
directory: unchanged files are not re-read, changed ones replaced, deleted ones removed). Each file
succeeds or fails alone: a bad file is reported with its sentence and the rest go on, and a failure
inside extraction (a crash, a hang, a memory blow-up) stays in the child process `isolate` runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ernie_ops.docs import chunk as chunking
from ernie_ops.docs import isolate
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.extract import SUFFIXES, Limits, check_name, check_size
from ernie_ops.docs.model import DocumentError
from ernie_ops.docs.store import Index, Scope
from ernie_ops.errors import ErnieOpsError

log = logging.getLogger("ernie_ops.docs")

Embedder = Callable[[list[str]], list[list[float]]]


@dataclass
class Outcome:
    """What happened to one file: added, replaced, unchanged, removed, or failed (with `error` and `reason`)."""

    name: str
    action: str
    doc_id: int | None = None
    chunks: int = 0
    pages: int | None = None
    kind: str = ""
    error: str = ""
    reason: str = ""
    empty_pages: list[int] = field(default_factory=list)  # PDF pages without a text layer (not indexed)
    embedded: int = 0  # passages given their missing vectors (an unchanged file after embeddings were turned on)

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if v not in ("", None) and k not in ("empty_pages", "embedded")}
        if self.empty_pages:
            out["empty_pages"] = list(self.empty_pages)
        if self.embedded:
            out["embedded"] = self.embedded
        return out


@dataclass
class IngestReport:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.action == "failed"]

    @property
    def changed(self) -> bool:
        return any(o.action in ("added", "replaced", "removed") or o.embedded for o in self.outcomes)

    def as_dict(self) -> dict:
        return {"ok": not self.failed, "changed": self.changed, "files": [o.as_dict() for o in self.outcomes]}


def limits(cfg: DocsConfig) -> Limits:
    return Limits(max_bytes=int(cfg.max_file_mb * 1024 * 1024), max_pages=cfg.max_pages)


def index_bytes(
    index: Index, data: bytes, raw_name: str | bytes, cfg: DocsConfig, *, collection: str = "default",
    owner: str | None = None, conversation: str | None = None, embed: Embedder | None = None, name: str | None = None,
    check: bool = False,
) -> Outcome:  # fmt: skip
    """Index one file's bytes; a DocumentError for bad input (the index is untouched then)."""
    name = name or check_name(raw_name)
    lim = limits(cfg)
    check_size(name, len(data), lim)  # before a child is started for it
    sha = hashlib.sha256(data).hexdigest()
    old = index.find(name, collection, owner, conversation)
    if old is not None and old.sha256 == sha:
        if check or embed is None:
            return Outcome(name, "unchanged", old.doc_id, old.chunks, old.pages, old.kind)
        try:  # embeddings may have been turned on since it was indexed: its passages get their vectors now
            embedded = backfill_document(index, old.doc_id, embed)
        except ErnieOpsError as exc:
            return Outcome(
                name, "failed", old.doc_id, old.chunks, old.pages, old.kind, reason=getattr(exc, "reason", "failed"),
                error=f"{name}: unchanged and still searchable by its words, but its passages could not be embedded: {exc}; "
                "sync again once the embedding server answers",
            )  # fmt: skip
        return Outcome(name, "unchanged", old.doc_id, old.chunks, old.pages, old.kind, embedded=embedded)
    if check:  # --check: what would change, judged by checksum only (nothing is read further, nothing written)
        return Outcome(name, "replaced" if old is not None else "added")
    extracted = isolate.extract_isolated(data, name, lim, timeout=cfg.extract_timeout_seconds, memory_mb=cfg.extract_memory_mb)
    chunks = chunking.chunk(extracted.sections, cfg.chunk_chars, cfg.overlap_chars)
    if not chunks:
        raise DocumentError(name, "no_text", "no text found; OCR is not supported")
    vectors = embed([c.text for c in chunks]) if embed else None
    doc_id = index.add(
        name, sha, len(data), extracted.kind, chunks, collection=collection, owner=owner, conversation=conversation,
        pages=extracted.pages, vectors=vectors,
    )  # fmt: skip
    action = "replaced" if old is not None else "added"
    log.info(
        "docs: %s %s (%s, %d passages%s) into %s%s", action, name, extracted.kind, len(chunks),
        f"; {no_text_layer(extracted.empty_pages)}" if extracted.empty_pages else "", collection, f" for {owner}" if owner else "",
    )  # fmt: skip
    return Outcome(name, action, doc_id, len(chunks), extracted.pages, extracted.kind, empty_pages=list(extracted.empty_pages))


SHOWN_PAGES = 10  # page numbers named in a summary line; more are counted


def _page_list(pages: Sequence[int], sep: str) -> str:
    shown = sep.join(map(str, pages[:SHOWN_PAGES]))
    return shown + (f"{sep}… (+{len(pages) - SHOWN_PAGES})" if len(pages) > SHOWN_PAGES else "")


def no_text_layer(empty: Sequence[int]) -> str:
    """'3 pages without a text layer (pages 4, 7, 9): scanned? run OCR first' ('' for none)."""
    if not empty:
        return ""
    many = len(empty) > 1
    return (
        f"{len(empty)} page{'s' if many else ''} without a text layer (page{'s' if many else ''} {_page_list(empty, ', ')}): "
        "scanned? run OCR first"
    )


def no_text_layer_zh(empty: Sequence[int]) -> str:
    """'3 页没有文字层（第 4、7、9 页）：扫描件？请先做 OCR' ('' for none)."""
    if not empty:
        return ""
    return f"{len(empty)} 页没有文字层（第 {_page_list(empty, '、')} 页）：扫描件？请先做 OCR"


def backfill_document(index: Index, doc_id: int, embed: Embedder) -> int:
    """Embed the document's passages that have no vector and store the vectors; how many. An EmbeddingError (the
    server down) leaves the document as it was: the next sync or `docs embed` tries again."""
    missing = index.missing_vectors(doc_id)
    if not missing:
        return 0
    vectors = embed([text for _, text in missing])
    return index.add_vectors(doc_id, [(cid, v) for (cid, _), v in zip(missing, vectors, strict=True)])


def backfill(index: Index, embed: Embedder, collections: list[str] | None = None, uploads: bool = False) -> IngestReport:
    """Give every passage without a vector its vector (embeddings turned on after the documents were indexed):
    the shared documents of `collections` (None: all), and the chat uploads too with `uploads`. One outcome per
    document that had passages to embed; document by document, each in its own transaction, so an embedding
    server that fails halfway keeps what was done and a rerun continues with the rest. The first EmbeddingError
    stops the run (every further document would wait for the same dead server): that document is "failed"."""
    report = IngestReport()
    docs = index.documents() if uploads else index.documents(Scope(collections=collections))
    docs = [d for d in docs if collections is None or d.collection in collections]
    for i, doc in enumerate(docs):
        try:
            n = backfill_document(index, doc.doc_id, embed)
        except ErnieOpsError as exc:
            report.outcomes.append(
                Outcome(
                    doc.name, "failed", doc.doc_id, reason=getattr(exc, "reason", "failed"),
                    error=f"{doc.name}: not embedded: {exc}; stopped here, {len(docs) - i - 1} more document(s) not tried "
                    "(the vectors stored so far are kept): run `ernie-ops docs embed` again once the server answers",
                )
            )  # fmt: skip
            break
        if n:
            report.outcomes.append(Outcome(doc.name, "unchanged", doc.doc_id, doc.chunks, doc.pages, doc.kind, embedded=n))
    return report


def _attempt(name: str, fn: Callable[[], Outcome]) -> Outcome:
    """One file's outcome; its failure (the file's, or the embedding server's for it) does not stop the others."""
    try:
        return fn()
    except DocumentError as exc:
        return Outcome(exc.name or name, "failed", error=str(exc), reason=exc.reason)
    except ErnieOpsError as exc:  # e.g. EmbeddingError: the server is down; the file is not indexed, the index unchanged
        return Outcome(name, "failed", error=f"{name}: not indexed: {exc}", reason=getattr(exc, "reason", "failed"))


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DocumentError(name, "unreadable", f"cannot be read: {exc.strerror or exc}") from None


def files_under(paths: Iterable[str | Path]) -> list[tuple[Path, str]]:
    """(path, display name) for each file given, and each supported file under a directory given
    (named by its path relative to that directory). A path that does not exist is a DocumentError."""
    out: list[tuple[Path, str]] = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in SUFFIXES and not q.name.startswith(".")):
                out.append((f, f.relative_to(p).as_posix()))
        elif p.exists():
            out.append((p, os.fsdecode(p.name)))
        else:
            out.append((p, os.fsdecode(str(p))))
    return out


def _check_relative(rel: str) -> str:
    """A sync name is a relative path: each part is checked as a file name."""
    return "/".join(check_name(part) for part in rel.split("/"))


def add_paths(
    index: Index, paths: Iterable[str | Path], cfg: DocsConfig, collection: str, embed: Embedder | None = None, check: bool = False
) -> IngestReport:
    report = IngestReport()
    for path, rel in files_under(paths):

        def one(path: Path = path, rel: str = rel) -> Outcome:
            if not path.exists():
                raise DocumentError(rel, "missing", "does not exist; give a file or a directory")
            name = _check_relative(rel)
            return index_bytes(index, _read(path, name), name, cfg, collection=collection, embed=embed, name=name, check=check)

        report.outcomes.append(_attempt(rel, one))
    return report


def sync_dir(
    index: Index, directory: str | Path, cfg: DocsConfig, collection: str, embed: Embedder | None = None, check: bool = False
) -> IngestReport:
    """Make `collection` hold exactly the supported files under `directory` (names: relative paths)."""
    root = Path(directory)
    if not root.is_dir():
        raise DocumentError(str(root), "missing", "is not a directory; give the directory to mirror into the collection")
    report = add_paths(index, [root], cfg, collection, embed, check)
    present = {o.name for o in report.outcomes}
    for doc in index.documents(Scope(collections=[collection])):
        if doc.name not in present:
            if not check:
                index.remove(doc.doc_id)
            report.outcomes.append(Outcome(doc.name, "removed", doc.doc_id))
    return report
