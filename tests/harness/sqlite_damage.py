"""A SQLite file damaged on disk, for the "a damaged file is kept aside and a fresh one started" tests of every
store over SQLite (the chat history, the document index, the onboarding push log): the kinds SQLite's own
checks find, written over the real file.

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
