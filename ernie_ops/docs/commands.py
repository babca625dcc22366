"""`ernie-ops docs add|sync|list|remove|search|embed`: each a function over the index, returning data and lines.

The CLI prints `lines` (or `data` with --json) and exits 1 when `ok` is false (a file that could
not be indexed; the others are indexed all the same). Writers run as the index's owner (`owner`).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field

from ernie_ops.docs import ingest, owner, store
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.retrieve import Retriever, hit_dict
from ernie_ops.docs.store import Index, Scope
from ernie_ops.errors import UsageError


@dataclass
class Result:
    data: dict | list
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ok: bool = True


def _embedder(cfg: DocsConfig):
    """`chat.docs.embeddings`'s client's sync embed, or None when the dense path is off."""
    if not cfg.embeddings.enabled:
        return None
    # imported here: it loads httpx, +95 ms on every `ernie-ops docs` command (-X importtime) though only the dense path needs it
    from ernie_ops.docs.embed import EmbeddingClient

    return EmbeddingClient.from_config(cfg.embeddings, api_key=os.environ.get("ERNIE_OPS_EMBEDDINGS_API_KEY") or None).embed_sync


def open_as_owner(cfg: DocsConfig) -> Index:
    """The index, this process first become its owner (as root: for good, see docs/owner.py): the CLI's writers."""
    owner.become_owner_of(cfg.index_file)
    return store.open_index(cfg.index_file, cfg.tokenizer)


def _line(o: ingest.Outcome) -> str:
    if o.embedded:
        return f"{'embedded':<9} {o.name} ({o.embedded} of {o.chunks} passages given their vectors)"
    if o.action not in ("added", "replaced"):
        return f"{o.action:<9} {o.name}"
    line = f"{o.action:<9} {o.name} ({o.kind}, {f'{o.pages} pages, ' if o.pages else ''}{o.chunks} passages)"
    return line + (f"; {ingest.no_text_layer(o.empty_pages)}" if o.empty_pages else "")


def _report(report: ingest.IngestReport, nothing: str = "nothing to do") -> Result:
    lines = [_line(o) for o in report.outcomes if o.action != "failed"]
    counts = {a: sum(o.action == a for o in report.outcomes) for a in ("added", "replaced", "unchanged", "removed", "failed")}
    summary = [f"{n} {a}" for a, n in counts.items() if n]
    if embedded := sum(o.embedded for o in report.outcomes):
        summary.append(f"{embedded} passages embedded in {sum(bool(o.embedded) for o in report.outcomes)} document(s)")
    lines.append(", ".join(summary) or nothing)
    return Result(report.as_dict(), lines, [o.error for o in report.failed], ok=not report.failed)


def _embed(index: Index, cfg: DocsConfig, collections: list[str] | None, uploads: bool) -> Result:
    """Back-fill: vectors for the passages indexed while embeddings were off (or while the server was down)."""
    embed = _embedder(cfg)
    if embed is None:
        raise UsageError("chat.docs.embeddings is off: set enabled: true, url and model there first, then run `ernie-ops docs embed`")
    report = ingest.backfill(index, embed, collections, uploads)
    result = _report(report, nothing="nothing to embed: every passage has its vector")
    result.data["embedded"] = sum(o.embedded for o in report.outcomes)
    return result


COLLECTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RESERVED = "uploads"  # the chat users' own files (private to a user's conversation)


def _check_collections(names: list[str] | str | None) -> None:
    for name in [names] if isinstance(names, str) else names or []:
        if not COLLECTION.match(name):
            raise UsageError(f"collection name {name!r}: use 1-64 letters, digits, '-' or '_', starting with a letter or digit")


def _shared(collection: str) -> None:
    """A collection the operator may write: a valid name, not the chat users' own uploads."""
    _check_collections(collection)
    if collection == RESERVED:
        raise UsageError(f"'{RESERVED}' holds the chat users' own uploads; pick another collection name")


def add(cfg: DocsConfig, paths: list[str], collection: str) -> Result:
    """Index files (a directory: every .pdf .md .txt .docx under it) into a shared collection."""
    _shared(collection)
    with open_as_owner(cfg) as index:
        return _report(ingest.add_paths(index, paths, cfg, collection, _embedder(cfg)))


def sync(cfg: DocsConfig, directory: str, collection: str, check: bool) -> Result:
    """Make `collection` hold exactly the documents under `directory`; `check`: say what would change, change nothing."""
    _shared(collection)
    if check and not os.path.exists(cfg.index_file):
        # --check on a host without an index yet: compare against an empty one, create nothing there
        with tempfile.TemporaryDirectory() as tmp, Index(os.path.join(tmp, "index.sqlite"), tokenizer=cfg.tokenizer) as empty:
            return _report(ingest.sync_dir(empty, directory, cfg, collection, check=True))
    with open_as_owner(cfg) as index:
        return _report(ingest.sync_dir(index, directory, cfg, collection, _embedder(cfg), check=check))


def list_documents(cfg: DocsConfig, collections: list[str] | None, uploads: bool) -> Result:
    """The indexed documents of `collections` (None: all); `uploads`: the chat users' own too."""
    _check_collections(collections)
    with open_as_owner(cfg) as index:
        return _list(index, collections, uploads)


def remove(cfg: DocsConfig, collection: str, names: list[str], every: bool) -> Result:
    """Remove documents of a shared collection by name, or `every` one of it."""
    _shared(collection)
    if not names and not every:
        raise UsageError("name the documents to remove, or --all for every document of --collection")
    with open_as_owner(cfg) as index:
        return _remove(index, collection, names, every)


def search(cfg: DocsConfig, question: str, collections: list[str] | None, k: int | None) -> Result:
    """The ranked passages for a question (k: how many; None: chat.docs.top_k)."""
    _check_collections(collections)
    with open_as_owner(cfg) as index:
        return _search(index, cfg, question, collections, k)


def embed(cfg: DocsConfig, collections: list[str] | None, uploads: bool) -> Result:
    """Vectors for the passages indexed without them (embeddings turned on later); a rerun continues."""
    _check_collections(collections)
    with open_as_owner(cfg) as index:
        return _embed(index, cfg, collections, uploads)


def _list(index: Index, collections: list[str] | None, uploads: bool) -> Result:
    if uploads:
        docs = [d for d in index.documents() if collections is None or d.collection in collections]
    else:
        docs = index.documents(Scope(collections=collections))
    data = [
        {"id": d.doc_id, "collection": d.collection, "owner": d.owner, "name": d.name, "kind": d.kind, "pages": d.pages,
         "passages": d.chunks, "bytes": d.size, "sha256": d.sha256, "added": d.added_at}
        for d in docs
    ]  # fmt: skip
    lines = [f"{'collection':<16} {'document':<40} {'kind':<9} {'pages':>5} {'passages':>8}"]
    for d in docs:
        who = f" (upload of {d.owner})" if d.owner else ""
        lines.append(f"{d.collection:<16} {d.name + who:<40} {d.kind:<9} {d.pages or '-':>5} {d.chunks:>8}")
    lines.append(f"{len(docs)} document(s) in {index.path}")
    return Result(data, lines)


def _remove(index: Index, collection: str, names: list[str], every: bool) -> Result:
    docs = index.documents(Scope(collections=[collection]))
    by_name = {d.name: d for d in docs}
    missing = [n for n in names if n not in by_name]
    chosen = docs if every else [by_name[n] for n in names if n in by_name]
    for d in chosen:
        index.remove(d.doc_id)
    lines = [f"removed   {d.name}" for d in chosen]
    errors = [f"{n}: no such document in collection '{collection}' (see `ernie-ops docs list`)" for n in missing]
    return Result({"removed": [d.name for d in chosen], "missing": missing}, lines, errors, ok=not missing)


def _search(index: Index, cfg: DocsConfig, question: str, collections: list[str] | None, k: int | None) -> Result:
    found = Retriever(index, cfg, _embedder(cfg)).search(question, Scope(collections=collections), k=k)
    raw = found.hits if found.answerable else found.lexical  # below the gate: what it ranked, for calibrating
    data = found.as_dict() | {"hits": [hit_dict(h) for h in raw]}
    lines = []
    for i, h in enumerate(raw, 1):
        where = f", {h.where}" if h.where else ""
        lines.append(f"【{i}】 {h.file}{where}  [{h.collection}]  score {h.score:.3f}  coverage {h.coverage:.2f}")
        lines.append("    " + h.text.replace("\n", " ")[:300])
    verdict = (
        "answerable" if found.answerable else f"below the relevance gate (best coverage {found.best_coverage:.2f} < {cfg.min_coverage})"
    )
    lines.append(f"{len(raw)} passage(s), {found.seconds * 1000:.1f} ms; {verdict}")
    return Result(data, lines)
