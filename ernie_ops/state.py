"""The cutover lock and the history file. History only: the truth is nginx + systemd + health.

The lock is an flock: the kernel drops it when its holder dies (even by SIGKILL), so a killed
cutover never leaves a stale lock behind; re-running simply takes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.errors import ErnieOpsError

HISTORY_LIMIT = 100


class LockHeld(ErnieOpsError):
    """Another cutover or rollback holds the lock."""


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextlib.contextmanager
def cutover_lock(state_dir: Path, what: str) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "cutover.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            raise LockHeld(f"another cutover is running ({holder}); wait for it to finish, then check `ernie-ops status`") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, {what}, since {now_iso()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


@dataclass
class State:
    active_port: int | None = None
    previous_port: int | None = None
    history: list[dict] = field(default_factory=list)


def load(state_dir: Path) -> State:
    try:
        data = json.loads((state_dir / "state.json").read_text())
        return State(data.get("active_port"), data.get("previous_port"), list(data.get("history", [])))
    except (FileNotFoundError, ValueError, AttributeError):
        return State()


def record(state_dir: Path, entry: dict, active_port: int | None, previous_port: int | None) -> State:
    """Append one cutover/rollback outcome and write the file atomically."""
    st = load(state_dir)
    st.active_port, st.previous_port = active_port, previous_port
    st.history = [*st.history, {"at": now_iso(), **entry}][-HISTORY_LIMIT:]
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=state_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(st), f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_dir / "state.json")
    return st
