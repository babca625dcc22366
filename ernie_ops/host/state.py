"""The cutover lock and the history file. History only: the truth is nginx + systemd + health.

The lock is an flock: the kernel drops it when its holder dies (even by SIGKILL), so a killed
cutover never leaves a stale lock behind; re-running simply takes it.

The history is never silently lost: a state file that is not valid JSON (or not shaped like one of
ours) is moved to `state.json.corrupt-<UTC time>` before a new one is written, and the caller gets a
warning saying so. A directory that cannot be written is a StateDirError naming paths.state_dir.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files import atomic
from ernie_ops.files.aside import keep_aside

HISTORY_LIMIT = 100
STATE_FILE = "state.json"


class LockHeld(ErnieOpsError):
    """Another cutover or rollback holds the lock."""


class StateDirError(ErnieOpsError):
    """The state directory (paths.state_dir) or its files cannot be written: a sentence saying what to fix."""


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dir_error(state_dir: Path, exc: OSError, doing: str = "write the state directory") -> StateDirError:
    """`cannot write the state directory /var/lib/ernie-ops (paths.state_dir): Permission denied; run as root or fix its owner`"""
    reason = exc.strerror or str(exc)
    if exc.filename and Path(exc.filename) != state_dir:
        reason += f" ({exc.filename})"
    if exc.errno in (errno.EACCES, errno.EPERM):
        fix = "run as root or fix its owner"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        fix = "a part of that path is a file, not a directory: point paths.state_dir at a directory"
    elif exc.errno == errno.EROFS:
        fix = "it is on a read-only file system: point paths.state_dir at a writable one"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on its file system"
    else:
        fix = "fix it or point paths.state_dir elsewhere"
    return StateDirError(f"cannot {doing} {state_dir} (paths.state_dir): {reason}; {fix}")


@contextlib.contextmanager
def cutover_lock(state_dir: Path, what: str) -> Iterator[None]:
    """Hold the cutover lock; StateDirError (before anything is started) when the directory cannot be written."""
    path = state_dir / "cutover.lock"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _dir_error(state_dir, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            raise LockHeld(f"another cutover is running ({holder}); wait for it to finish, then check `ernie-ops status`") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, {what}, since {now_iso()}\n".encode(), 0)
        except OSError as exc:
            raise _dir_error(state_dir, exc) from None
        yield
    finally:
        os.close(fd)  # releases the flock


@dataclass
class State:
    active_port: int | None = None
    previous_port: int | None = None
    history: list[dict] = field(default_factory=list)
    # what the caller must tell the operator (a corrupt or unreadable state file); never written to the file
    warnings: list[str] = field(default_factory=list)
    # a pool's replicas as its upgrades left them: port (a string: JSON) -> {"slot", "version", "since"}
    replicas: dict[str, dict] = field(default_factory=dict)

    def as_file(self) -> dict:
        out = {"active_port": self.active_port, "previous_port": self.previous_port, "history": self.history}
        return out | ({"replicas": self.replicas} if self.replicas else {})


class _Corrupt(Exception):
    """The state file is there but is not a state file; the message says how (for the warning)."""


def _parse(raw: bytes) -> State:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise _Corrupt(f"was not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _Corrupt(f"was not a JSON object (found {type(data).__name__})")
    for key in ("active_port", "previous_port"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _Corrupt(f"had {key} {value!r}, not a port")
    history = data.get("history", [])
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise _Corrupt("had a history that is not a list of entries")
    replicas = data.get("replicas", {})
    if not isinstance(replicas, dict) or not all(isinstance(e, dict) for e in replicas.values()):
        raise _Corrupt("had replicas that are not an object of entries")
    return State(data.get("active_port"), data.get("previous_port"), list(history), replicas=dict(replicas))


def load(state_dir: Path) -> State:
    """The state file, read only; a missing one is an empty State.

    A corrupt or unreadable file gives an empty State whose `warnings` say so: this function is
    used by read-only commands (status, rollback's choice of port) and never moves the file;
    `record` keeps a corrupt one aside before it writes a new one.
    """
    path = state_dir / STATE_FILE
    try:
        return _parse(path.read_bytes())
    except FileNotFoundError:
        return State()
    except OSError as exc:
        return State(warnings=[f"cannot read the state file {path} ({exc.strerror or exc}); the history is not shown"])
    except _Corrupt as exc:
        return State(
            warnings=[
                f"state file {path} {exc}; the next cutover or rollback keeps it as {STATE_FILE}.corrupt-<UTC time> "
                "and starts a new history"
            ]
        )


def record(state_dir: Path, entry: dict, active_port: int | None, previous_port: int | None) -> State:
    """Append one cutover/rollback outcome and write the file atomically.

    A corrupt state file is kept aside first (the returned State's `warnings` say where); a file that
    cannot be read, or a directory that cannot be written, is a StateDirError and nothing is overwritten.
    """

    def change(st: State) -> None:
        st.active_port, st.previous_port = active_port, previous_port
        st.history = [*st.history, {"at": now_iso(), **entry}][-HISTORY_LIMIT:]

    return _update(state_dir, change)


def note_replica(state_dir: Path, port: int, slot: int | None, version: str = "") -> State:
    """A pool upgrade's step landed: the replica on `port` serves `version` in `slot` since now (slot None: it was
    stopped, its entry goes). Written at each step, so after a kill -9 the file says where every replica stands."""

    def change(st: State) -> None:
        if slot is None:
            st.replicas.pop(str(port), None)
        else:
            st.replicas[str(port)] = {"slot": slot, "version": version, "since": now_iso()}

    return _update(state_dir, change)


def _update(state_dir: Path, change: Callable[[State], None]) -> State:
    """Read, change, write atomically (a corrupt file kept aside first)."""
    path = state_dir / STATE_FILE
    try:
        st = _parse(path.read_bytes())
    except FileNotFoundError:
        st = State()
    except OSError as exc:
        raise _dir_error(state_dir, exc, "read the state file in") from None
    except _Corrupt as exc:
        try:
            aside = keep_aside(path)
        except OSError as err:
            raise _dir_error(state_dir, err, "keep the corrupt state file aside in") from None
        st = State(warnings=[f"state file {path} {exc}; kept it as {aside} and started a new history"])
    change(st)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        # 0644: 0600 would hide the history from `ernie-ops status` run without root
        atomic.write_text(path, json.dumps(st.as_file(), indent=2), mode=0o644)
    except OSError as exc:
        raise _dir_error(state_dir, exc) from None
    return st
