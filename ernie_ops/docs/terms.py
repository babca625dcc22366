"""What the index's token column holds for a passage, and the term statistics search weighs questions by: each
term's document frequency (the `terms` table, kept in step with every add and removal) and its BM25 idf. The index
ranks with FTS5's own bm25(); these numbers give each hit its coverage (the share of the question's weight it holds).
"""

from __future__ import annotations

import functools
import math
import sqlite3
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from ernie_ops.docs import tokens

TOKEN_SOURCE = "heading+passage"  # what the token column is made of (meta 'token_source'); another value: rebuilt
INDEX_HEADINGS = True  # the heading path goes into the token column (False: the passage alone; a bench experiment)


def token_source_name() -> str:
    return TOKEN_SOURCE if INDEX_HEADINGS else "passage"


def token_source(text: str, heading: Sequence[str]) -> str:
    """What the token column indexes for a passage: its heading path (e.g. 部署 > 升级), a newline, its text."""
    if not INDEX_HEADINGS or not heading:
        return text
    return " > ".join(heading) + "\n" + text


@functools.lru_cache(maxsize=4096)
def heading_token_count(heading: tuple[str, ...], tokenizer: str) -> int:
    """How many tokens token_source() puts in front of the passage's own: its heading path's. The path and the text
    are apart (a newline ends every token and CJK run), so the column's tokens are the path's, then the text's."""
    if not INDEX_HEADINGS or not heading:
        return 0
    return len(tokens.tokenize(" > ".join(heading), tokenizer))


def fold(text: str) -> str:
    """Case and diacritics folded as FTS5's unicode61 (remove_diacritics 2) does, near enough to compare tokens."""
    text = text.casefold()
    if text.isascii():
        return text
    split = unicodedata.normalize("NFKD", text)
    if len(split) == len(text):  # nothing decomposed (CJK, or tokens.py's NFKC output without accents): no marks to drop
        return text
    return "".join(ch for ch in split if not unicodedata.combining(ch))


def counts(token_texts: Iterable[str]) -> Counter[str]:
    """In how many of these passages each (folded) token occurs."""
    out: Counter[str] = Counter()
    for text in token_texts:
        out.update(set(fold(text).split()))
    return out


def adjust(conn: sqlite3.Connection, term_counts: Counter[str], sign: int) -> None:
    """Add (sign +1) or take away (-1) passages' term counts in `terms`, the document frequencies search reads."""
    if sign > 0:
        # in key order: each B-tree page is visited once, not once per term (a 2x difference at 100k passages)
        conn.executemany(
            "INSERT INTO terms VALUES (?, ?) ON CONFLICT (term) DO UPDATE SET df = df + excluded.df", sorted(term_counts.items())
        )
    else:
        conn.executemany("UPDATE terms SET df = df - ? WHERE term = ?", ((n, t) for t, n in sorted(term_counts.items())))
        conn.executemany("DELETE FROM terms WHERE term = ? AND df <= 0", ((t,) for t in term_counts))


def idf(df: int, n: int) -> float:
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)
