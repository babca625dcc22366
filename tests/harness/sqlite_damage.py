"""A SQLite file damaged on disk, for the "a damaged file is kept aside and a fresh one started" tests of every
store over SQLite (the chat history, the document index, the onboarding push log): the kinds SQLite's own
checks find, written over the real file; and a file made "full" for real (`cap_pages`: SQLite's max_page_count on
every new connection of an engine).

    @pytest.mark.parametrize("damage", sqlite_damage.KINDS)
    def test_...(tmp_path, damage):
        data = sqlite_damage.damage_file(path, damage)  # the bytes now in the file
"""

from __future__ import annotations

from pathlib import Path

from ernie_ops.files import sqlite_file

KINDS = ("pages", "header_then_garbage", "truncated")
PAGE = 4096


def damaged(data: bytes, kind: str) -> bytes:
    """`data` (a SQLite file's bytes) damaged: `pages`, every third page from page 3 overwritten; `header_then_garbage`,
    a SQLite header followed by noise; `truncated`, the first half only."""
    if kind == "pages":
        out = bytearray(data)
        for off in range(PAGE * 2, len(out), PAGE * 3):
            out[off : off + PAGE] = b"\xa5" * PAGE
        return bytes(out)
    if kind == "header_then_garbage":
        return sqlite_file.SQLITE_HEADER + b"\x13\x37" * 3000
    if kind == "truncated":
        return data[: len(data) // 2]
    raise ValueError(f"no damage called {kind!r}; one of {', '.join(KINDS)}")


def damage_file(path: Path, kind: str) -> bytes:
    """Damage the file at `path` (closed) in place; returns the bytes it now holds."""
    data = damaged(path.read_bytes(), kind)
    path.write_bytes(data)
    return data


def cap_pages(sync_engine, limit: dict) -> None:
    """Every new connection of `sync_engine` gets `PRAGMA max_page_count = limit["pages"]` (0: no cap), so writes
    past it fail with SQLite's own "database or disk is full"; set the limit, then dispose the engine's pool."""
    from sqlalchemy import event

    @event.listens_for(sync_engine, "connect")
    def _cap(dbapi_conn, _record):
        if limit["pages"]:
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA max_page_count = {limit['pages']}")
            cur.close()
