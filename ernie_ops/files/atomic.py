"""One atomic file write: readers see the old file or the new one, never half, and after a crash too.

The data goes to a temp file with a unique name in the same directory (two writers never share one),
is flushed and fsynced, gets its mode, replaces the target with os.replace (atomic on one file
system), and the directory is fsynced so the rename itself survives a power cut. On any failure the
temp file is removed and the old file is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

NEW_FILE_MODE = 0o644  # mkstemp's 0600 would hide the file from the tools run without root


def write_bytes(
    path: str | os.PathLike,
    data: bytes,
    mode: int | None = None,
    new_mode: int = NEW_FILE_MODE,
    prepare: Callable[[int], None] | None = None,
) -> None:
    """Replace `path` with `data`; see `write_with` for `mode`, `new_mode` and `prepare`."""
    write_with(path, lambda f: f.write(data), mode, new_mode, prepare)


def write_text(
    path: str | os.PathLike,
    text: str,
    mode: int | None = None,
    new_mode: int = NEW_FILE_MODE,
    prepare: Callable[[int], None] | None = None,
    encoding: str = "utf-8",
) -> None:
    """Replace `path` with `text` encoded (UTF-8 unless told); see `write_with`."""
    write_bytes(path, text.encode(encoding), mode, new_mode, prepare)


def write_with(
    path: str | os.PathLike,
    write: Callable[[BinaryIO], object],
    mode: int | None = None,
    new_mode: int = NEW_FILE_MODE,
    prepare: Callable[[int], None] | None = None,
) -> None:
    """Replace `path` with what `write(f)` writes to a binary file.

    `mode`: the new file's permission bits; None keeps the existing file's, or `new_mode` for a new file.
    `prepare(fd)`: called on the written temp file before its mode is set (e.g. to set its owner).
    The parent directory must exist. Errors (OSError and any other) propagate after the clean-up."""
    target = Path(path)
    directory = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            if prepare is not None:
                prepare(f.fileno())
            os.fchmod(f.fileno(), mode if mode is not None else _existing_mode(target, new_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _existing_mode(path: Path, default: int) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return default


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
