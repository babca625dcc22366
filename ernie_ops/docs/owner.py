"""Run the index's writers as the user that owns it.

The chat app (User=ernie) owns its state directory and the index in it; `ernie-ops docs ...` is run
by an operator as root. A file root created there (the database, its -wal and -shm) would lock the
app out of its own index, so a root process takes the owner of the nearest existing directory on
the index's path before it opens anything, and everything it creates belongs to the app.
"""

from __future__ import annotations

import os
from pathlib import Path

from ernie_ops.errors import ErnieOpsError


def nearest_existing(path: Path) -> Path:
    p = path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def become_owner_of(index_file: str | Path) -> tuple[int, int] | None:
    """As root: switch to the uid/gid owning the nearest existing directory of `index_file` (if not root).
    Returns the (uid, gid) taken, or None when nothing changed. Irreversible for this process: call it
    only in a CLI command that does nothing else with root's rights afterwards."""
    if os.geteuid() != 0:
        return None
    where = nearest_existing(Path(index_file).resolve())
    st = where.stat()
    if st.st_uid == 0:
        return None
    try:
        os.setgroups([])
        os.setgid(st.st_gid)
        os.setuid(st.st_uid)
    except OSError as exc:
        raise ErnieOpsError(f"cannot act as the owner of {where} (uid {st.st_uid}) to write the index: {exc.strerror or exc}") from None
    os.umask(0o077)
    return st.st_uid, st.st_gid
