"""Process-group and shared-memory bookkeeping for the engine the launcher owns.

vLLM runs as an API-server process plus engine-core children. A SIGKILL of the group (the only
thing that stops an engine still loading) leaves `/dev/shm/psm_*` segments behind (~400 MB
measured). The launcher records which segments its own processes map, and removes exactly
those, never another instance's.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

SHM_DIR = "/dev/shm"
# multiprocessing's SharedMemory segments and its POSIX semaphores
SHM_PREFIXES = ("psm_", "sem.mp-")


def group_members(pgid: int) -> list[int]:
    """PIDs whose process group is `pgid` (read from /proc; the group outlives its leader)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # fields after the ")" of comm: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def shm_files_of(pids: list[int]) -> set[str]:
    """Shared-memory files (`/dev/shm/psm_*`, `sem.mp-*`) mapped or held open by these processes."""
    found: set[str] = set()
    prefixes = tuple(f"{SHM_DIR}/{p}" for p in SHM_PREFIXES)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    idx = line.find(SHM_DIR + "/")
                    if idx >= 0 and line.startswith(prefixes, idx):
                        found.add(line[idx:].split()[0])
        except OSError:
            pass
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith(prefixes):
                    found.add(target.split()[0])
        except OSError:
            pass
    return found


def remove_files(paths: set[str]) -> list[str]:
    """Delete the given segments that still exist; returns those removed."""
    removed = []
    for path in sorted(paths):
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_group_gone(pgid: int, timeout: float, interval: float = 0.05) -> bool:
    """True once no process of the group is left (zombies of our own child included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive_members(pgid):
            return True
        time.sleep(interval)
    return not _alive_members(pgid)


def _alive_members(pgid: int) -> list[int]:
    alive = []
    for pid in group_members(pgid):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def kill_group(pgid: int, timeout: float = 10.0) -> bool:
    """SIGKILL the whole group and wait until it is gone."""
    signal_group(pgid, signal.SIGKILL)
    return wait_group_gone(pgid, timeout)
