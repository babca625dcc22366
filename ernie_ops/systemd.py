"""systemctl, in one place: start/stop/state of `ernie-vllm@PORT`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from ernie_ops import enginelog
from ernie_ops.errors import ErnieOpsError

UNIT_TEMPLATE = "ernie-vllm@{port}.service"
ATTEMPT_MARKER = "launcher started"  # the launcher's first line of each run: `[serve PORT] launcher started (pid N)`
JOURNAL_LINES = 1000  # a failed vLLM start prints ~230 lines (truncated weights, measured)


class SystemdError(ErnieOpsError):
    """systemctl failed; carries its message and the unit's last log lines when useful."""


def unit_name(port: int) -> str:
    return UNIT_TEMPLATE.format(port=port)


@dataclass(frozen=True)
class UnitState:
    active: str  # active, activating, inactive, failed, deactivating, ...
    sub: str
    result: str
    main_pid: int
    status_text: str
    n_restarts: int


def _systemctl(*args: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["systemctl", "--no-pager", *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SystemdError("systemctl not found: ernie-ops manages instances through systemd") from None
    except subprocess.TimeoutExpired:
        raise SystemdError(f"`systemctl {' '.join(args)}` did not finish within {timeout:.0f}s") from None


def state(port: int) -> UnitState:
    values = show(unit_name(port), "ActiveState", "SubState", "Result", "MainPID", "StatusText", "NRestarts")
    return UnitState(
        active=values.get("ActiveState", "unknown"),
        sub=values.get("SubState", ""),
        result=values.get("Result", ""),
        main_pid=int(values.get("MainPID") or 0),
        status_text=values.get("StatusText", ""),
        n_restarts=int(values.get("NRestarts") or 0),
    )


def start(port: int, timeout: float) -> None:
    """Blocks until READY (Type=notify) or failure; the error names the last journal lines."""
    r = _systemctl("start", unit_name(port), timeout=timeout)
    if r.returncode != 0:
        raise SystemdError(f"systemctl start {unit_name(port)} failed; {start_failure(journal_lines(port), port)}")


def stop(port: int, timeout: float = 120) -> None:
    run_verb("stop", unit_name(port), timeout=timeout)


def set_enabled(port: int, enabled: bool) -> None:
    """Whether the instance starts at boot (joins ernie-vllm.target): it must follow the routed port,
    or a reboot brings up an instance nginx no longer routes to."""
    run_verb("enable" if enabled else "disable", unit_name(port), timeout=30)


def journal_lines(port: int, lines: int = JOURNAL_LINES) -> list[str] | None:
    """The unit's last journal lines, message only; None when the journal cannot be read."""
    try:
        r = subprocess.run(
            ["journalctl", "--no-pager", "-o", "cat", "-n", str(lines), "-u", unit_name(port)], capture_output=True, text=True, timeout=15
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return r.stdout.splitlines() if r.returncode == 0 else None


def start_failure(lines: list[str] | None, port: int, keep: int = 2) -> str:
    """Why a start failed, from the unit's journal lines: the launcher's last `keep` lines and the engine's
    own root-cause error (vLLM's other lines are skipped), both from the last attempt only."""
    if lines is None:
        return "the launcher said: (journal unavailable)"
    tag = f"[serve {port}]"
    starts = [i for i, line in enumerate(lines) if f"{tag} {ATTEMPT_MARKER}" in line]
    attempt = lines[starts[-1] :] if starts else lines
    mine = [line for line in attempt if tag in line]
    said = " | ".join(mine[-keep:]) or "(no launcher lines in the journal)"
    error = enginelog.engine_error(line for line in attempt if tag not in line)
    if error is None or error in said:  # the launcher's exit line already quotes it
        return f"the launcher said: {said}"
    return f"the launcher said: {said}; the engine's last error: {error}"


def show(unit: str, *props: str) -> dict[str, str]:
    """`systemctl show UNIT -p ...` as a dict (any unit, not only instances)."""
    r = _systemctl("show", unit, *[f"--property={p}" for p in props], timeout=15)
    if r.returncode != 0:
        raise SystemdError(f"systemctl show {unit}: {r.stderr.strip()}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def run_verb(verb: str, unit: str, timeout: float = 900) -> None:
    """systemctl start/restart/enable/... of any unit; the error carries systemctl's own words."""
    r = _systemctl(verb, unit, timeout=timeout)
    if r.returncode != 0:
        raise SystemdError(f"systemctl {verb} {unit} failed: {r.stderr.strip() or r.stdout.strip()}")
