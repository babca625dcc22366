"""Where a watched cutover (canary steps, bake window) stands, on disk: `rollout.json` in paths.state_dir.

The watcher rewrites it at each evaluation (phase, step, weights, the live verdict, its pid) and removes
it when the rollout ends (promoted or rolled back: the outcome goes to the history in state.json). So a
file that is there while its watcher's pid is gone means the tool was killed mid-rollout: `ernie-ops
status` says traffic may be split with nobody watching, and a re-run of the cutover (or `--abort`) takes
it over from what the file says.

`--promote` / `--abort` from another shell, while a watcher runs, leave a request beside it
(`rollout.request`) that the watcher reads at its next evaluation.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files import atomic
from ernie_ops.files.aside import keep_aside

FILE = "rollout.json"
REQUEST = "rollout.request"
REQUESTS = ("promote", "abort")


class RolloutFileError(ErnieOpsError):
    """The rollout file cannot be read or written: a sentence naming it."""


@dataclass
class Rollout:
    target: int
    source: int
    steps: list[int]
    bake_seconds: float
    sticky: str = "none"
    phase: str = "canary"  # canary | bake | rollback | promote (the last two: an ending under way, finished by a re-run)
    step: int = 0  # index into steps while in canary
    percent: int = 0  # share of traffic on the target now
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)  # wall clock (survives the watcher)
    phase_started: float = field(default_factory=time.time)
    bake_until: float | None = None
    ending: str | None = None  # why the rollback under way started
    verdict: dict | None = None  # the last evaluation: result, checks, both sides' numbers
    verdict_at: float | None = None
    decisions: list[dict] = field(default_factory=list)

    def describe(self) -> str:
        if self.phase == "rollback":
            return f"rollback {self.target} -> {self.source} under way ({self.ending})"
        if self.phase == "promote":
            return f"promotion of {self.target} under way (retiring {self.source})"
        if self.phase == "bake":
            left = max(0.0, (self.bake_until or 0) - time.time())
            return f"bake of {self.target} ({self.source} warm, unrouted), {left:.0f}s left"
        return f"canary {self.source} -> {self.target}: step {self.step + 1}/{len(self.steps)} at {self.percent}%"

    def watcher_alive(self) -> bool:
        return _is_ernie_ops(self.pid)


def _is_ernie_ops(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"ernie" in cmdline


def load(state_dir: Path, keep_corrupt_aside: bool = True) -> Rollout | None:
    """The rollout in progress, or None. A file that is not one of ours is an error; it is kept aside first
    unless the caller only reads (`ernie-ops status` never moves files)."""
    path = state_dir / FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RolloutFileError(f"cannot read {path}: {exc.strerror or exc}; fix its permissions (paths.state_dir)") from None
    try:
        data = json.loads(raw)
        return Rollout(**{k: v for k, v in data.items() if k in Rollout.__dataclass_fields__})
    except (ValueError, TypeError) as exc:
        kept = f"kept it as {keep_aside(path)}" if keep_corrupt_aside else "the next cutover keeps it aside"
        raise RolloutFileError(
            f"{path} was not a rollout record ({exc}); {kept}. Check `ernie-ops status`: if the gateway splits "
            "traffic, `ernie-ops cutover PORT` routes all of it to one instance"
        ) from None


def save(state_dir: Path, r: Rollout) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        # fsynced: written ahead of every nginx change, it must be there after a crash
        atomic.write_text(state_dir / FILE, json.dumps(asdict(r), indent=1), mode=0o644)
    except OSError as exc:
        raise RolloutFileError(f"cannot write {state_dir / FILE}: {exc.strerror or exc}") from None


def clear(state_dir: Path) -> None:
    (state_dir / FILE).unlink(missing_ok=True)
    (state_dir / REQUEST).unlink(missing_ok=True)


def request(state_dir: Path, what: str) -> None:
    (state_dir / REQUEST).write_text(what + "\n")


def take_request(state_dir: Path) -> str | None:
    path = state_dir / REQUEST
    try:
        what = path.read_text().strip()
    except OSError:
        return None
    path.unlink(missing_ok=True)
    return what if what in REQUESTS else None
