"""Searching the document index: BM25 over the passages' token text, bounded by a postings budget (the rarest terms
first, while their posting lists fit), with each hit's coverage of the question's terms; and the nearest passages
by cosine when the index holds vectors. The scope is in the ranked query itself. Why the budget and what it costs:
docs/design/document-index.md."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from ernie_ops.docs import scope as scopes
from ernie_ops.docs import terms, tokens
from ernie_ops.docs.index_file import IndexFile, vector_blob
from ernie_ops.docs.model import Hit
from ernie_ops.docs.scope import Scope

MAX_QUERY_TERMS = 16
POSTINGS_BUDGET = 3_000  # rows a query may rank: BM25 + the scope join cost 2-4 us of CPU per matching row here

_HIT_COLS = 'c.id, c.doc_id, d.collection, d.name, (SELECT text FROM texts WHERE id = c.id), c.page, c.heading, c.start, c."end"'


def search(file: IndexFile, tokenizer: str, question: str, scope: Scope, k: int = 5) -> list[Hit]:
    """The k passages the scope may see that best match the question (BM25), with coverage filled."""
    asked = list(dict.fromkeys(t for t in tokens.query_terms(question, tokenizer) if t))
    if not asked or k < 1:
        return []
    where, params = scopes.where(scope)
    with file.read() as conn:
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
            ranked = _ranked(conn, " AND ".join(f"({tokens.fts_match([t])})" for t in present[:3]), where, params, k)
        if not ranked:
            ranked = _ranked(conn, tokens.fts_match(kept), where, params, k)
        if not ranked:
            return []
        ids = [cid for cid, _ in ranked]
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT {_HIT_COLS} FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE c.id IN ({marks})", ids)
        details = {r[0]: r for r in rows}
        indexed = dict(conn.execute(f"SELECT rowid, tokens FROM fts WHERE rowid IN ({marks})", ids).fetchall())
    total = sum(idf.values())
    hits = []
    for rank, (cid, bm25) in enumerate(ranked, 1):
        skip = terms.heading_token_count(tuple(json.loads(details[cid][6])), tokenizer)
        has = set(terms.fold(indexed.get(cid, "")).split()[skip:])
        coverage = sum(idf[t] for t in asked if folded[t] in has) / total if total else 0.0
        hits.append(replace(_hit(details[cid], -bm25, "lexical", rank), coverage=coverage))
    return hits


def search_dense(file: IndexFile, vector: Sequence[float], scope: Scope, k: int = 5) -> list[Hit]:
    """The k passages the scope may see nearest the vector (cosine); [] when the index holds no vectors."""
    if k < 1:
        return []
    with file.lock:
        dim = file.dimension()
        if dim is None:
            return []
        file.load_vec()
        blob = vector_blob(vector, dim, "the question's vector")
        with file.read() as conn:
            shared = [r[0] for r in conn.execute("SELECT DISTINCT collection FROM documents WHERE owner IS NULL")]
            keys = scopes.vector_keys(scope, shared)
            if not keys:
                return []
            near = conn.execute(
                "SELECT chunk_id, distance FROM vec WHERE embedding MATCH ? AND k = ? "
                f"AND scope IN ({','.join('?' * len(keys))}) ORDER BY distance",
                [blob, k, *keys],
            ).fetchall()
            if not near:
                return []
            where, params = scopes.where(scope)
            dist = dict(near)
            rows = conn.execute(
                f"SELECT {_HIT_COLS} FROM chunks c JOIN documents d ON d.id = c.doc_id "
                f"WHERE c.id IN ({','.join('?' * len(dist))}) AND {where}",
                [*dist, *params],
            ).fetchall()
    rows.sort(key=lambda r: (dist[r[0]], r[0]))
    return [_hit(r, 1.0 - dist[r[0]], "dense", rank) for rank, r in enumerate(rows, 1)]


def _ranked(conn: sqlite3.Connection, match: str, where: str, params: list, k: int) -> list[tuple[int, float]]:
    """(chunk id, bm25) of the k best matches the scope may see: the scope is in the ranked query itself."""
    return conn.execute(
        "SELECT c.id, bm25(fts) FROM fts JOIN chunks c ON c.id = fts.rowid JOIN documents d ON d.id = c.doc_id "
        f"WHERE fts MATCH ? AND {where} ORDER BY bm25(fts) LIMIT ?",
        [match, *params, k],
    ).fetchall()


def _hit(row: tuple, score: float, rank_name: str, rank: int) -> Hit:
    cid, doc_id, collection, name, text, page, heading, start, end = row
    return Hit(cid, doc_id, collection, name, text, score, page, tuple(json.loads(heading)), start, end, {rank_name: rank})
