"""This process's cgroup memory limit (cgroup v2), as systemd set it from the unit's `MemoryMax=`."""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_max_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """The `memory.max` of the cgroup this process runs in; None when there is none to read (no cgroup v2, no
    limit: "max", or run by hand outside a unit with one)."""
    try:
        line = next((row for row in proc_cgroup.read_text().splitlines() if row.startswith("0::")), None)
        if line is None:
            return None
        value = (root / line[3:].lstrip("/") / "memory.max").read_text().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() else None
