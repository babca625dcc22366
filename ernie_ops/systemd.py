"""systemctl, in one place: start/stop/state of `ernie-vllm@PORT`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from ernie_ops.errors import ErnieOpsError

UNIT_TEMPLATE = "ernie-vllm@{port}.service"


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
    props = ["ActiveState", "SubState", "Result", "MainPID", "StatusText", "NRestarts"]
    r = _systemctl("show", unit_name(port), *[f"--property={p}" for p in props], timeout=15)
    if r.returncode != 0:
        raise SystemdError(f"systemctl show {unit_name(port)}: {r.stderr.strip()}")
    values = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
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
        raise SystemdError(f"systemctl start {unit_name(port)} failed; the launcher said: {journal_tail(port)}")


def stop(port: int, timeout: float = 120) -> None:
    r = _systemctl("stop", unit_name(port), timeout=timeout)
    if r.returncode != 0:
        raise SystemdError(f"systemctl stop {unit_name(port)} failed: {r.stderr.strip()}")


def set_enabled(port: int, enabled: bool) -> None:
    """Whether the instance starts at boot (joins ernie-vllm.target): it must follow the routed port,
    or a reboot brings up an instance nginx no longer routes to."""
    verb = "enable" if enabled else "disable"
    r = _systemctl(verb, unit_name(port), timeout=30)
    if r.returncode != 0:
        raise SystemdError(f"systemctl {verb} {unit_name(port)} failed: {r.stderr.strip()}")


def journal_tail(port: int, lines: int = 2) -> str:
    """The launcher's own last lines for the unit (vLLM's log lines are skipped: they rarely say why)."""
    try:
        r = subprocess.run(
            ["journalctl", "--no-pager", "-o", "cat", "-n", "300", "-u", unit_name(port)], capture_output=True, text=True, timeout=15
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return "(journal unavailable)"
    mine = [line for line in r.stdout.splitlines() if f"[serve {port}]" in line]
    return " | ".join(mine[-lines:]) or "(no launcher lines in the journal)"


def journal_argv(ports: list[int], follow: bool = False, lines: int = 100, launcher_only: bool = False) -> list[str]:
    """journalctl for the given instances (what `ernie-ops logs` runs)."""
    argv = ["journalctl", "--no-pager", "-o", "short-iso", "-n", str(lines)]
    for port in ports:
        argv += ["-u", unit_name(port)]
    if launcher_only:
        argv += ["--grep", r"\[serve [0-9]+\]"]
    if follow:
        argv.append("-f")
    return argv


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
