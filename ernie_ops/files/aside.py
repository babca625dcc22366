"""Keep a damaged file aside instead of overwriting it: `<name>.corrupt-<UTC time>[-n]`, never over a file.

The state file (state.py) and the document index (docs/store.py) both start afresh when theirs cannot
be read, and both must keep what was there for a person to inspect or recover.
"""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime
from pathlib import Path


def keep_aside(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """Move `path` (and `path`+suffix for each companion suffix that exists, e.g. SQLite's -wal/-shm) to
    `<name>.corrupt-<UTC time>[-n]`; a hard link claims the name, so an existing copy is never replaced."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        aside = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n else ""))
        try:
            os.link(path, aside)
        except FileExistsError:
            continue
        for suffix in companions:
            side = path.with_name(path.name + suffix)
            target = aside.with_name(aside.name + suffix)
            if side.exists() and not target.exists():
                os.replace(side, target)
        os.unlink(path)
        return aside
    raise FileExistsError(errno.EEXIST, "1000 corrupt copies from this second already exist", str(path))
