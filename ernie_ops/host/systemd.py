"""systemctl, in one place: start/stop/state of `ernie-vllm@PORT`."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from ernie_ops.errors import ErnieOpsError
from ernie_ops.serving import enginelog

UNIT_TEMPLATE = "ernie-vllm@{port}.service"
ATTEMPT_MARKER = "launcher started"  # the launcher's first line of each run: `[serve PORT] launcher started (pid N)`
JOURNAL_LINES = 1000  # a failed vLLM start prints ~230 lines (truncated weights, measured)
JOURNAL_HINT_LINES = 100  # what the operator is told to read: a failed start's launcher and engine lines
START_VERBS = frozenset({"start", "restart", "try-restart", "reload-or-restart"})
INSTANCE_UNIT = re.compile(r"ernie-vllm@(\d+)\.service")
JOURNAL_SETTLE = (0.3, 0.7, 1.5)  # re-reads while the failed attempt's exit line is not in the journal yet


class SystemdError(ErnieOpsError):
    """systemctl failed; carries its message and the unit's last log lines when useful."""


class SystemdTimeout(SystemdError):
    """systemctl did not return within its timeout (the job may still run)."""


class StartFailed(SystemdError):
    """A unit did not start (or restart): why, in the unit's own words, and the one command that shows its journal.
    Every start of an instance goes through here (`ernie-ops apply`, the cutover's start step, the Ansible role)."""

    def __init__(self, unit: str, reason: str):
        self.unit, self.reason, self.journal = unit, reason, journal_command(unit)
        super().__init__(f"{unit} did not start: {reason}\nIts journal: {self.journal}")


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


def journal_command(unit: str) -> str:
    """The one command that shows why `unit` did (not) start, as an operator types it on the host."""
    return f"journalctl -u {unit.removesuffix('.service')} -n {JOURNAL_HINT_LINES}"


def _systemctl(*args: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["systemctl", "--no-pager", *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SystemdError("systemctl not found: ernie-ops manages instances through systemd") from None
    except subprocess.TimeoutExpired:
        raise SystemdTimeout(f"`systemctl {' '.join(args)}` did not finish within {timeout:.0f}s") from None


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
    """Blocks until READY (Type=notify) or failure; the error (StartFailed) is the launcher's reason."""
    run_verb("start", unit_name(port), timeout=timeout)


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


def _attempt(lines: list[str], port: int, pid: int | None) -> list[str]:
    """The lines of one run of the launcher: the one with `pid` (systemd's ExecMainPID) when the journal has it,
    else the last one. A restart after the failure (Restart=on-failure) must not hide the run that failed."""
    marker = f"[serve {port}] {ATTEMPT_MARKER}"
    starts = [i for i, line in enumerate(lines) if marker in line]
    if not starts:
        return lines
    chosen = starts[-1]
    if pid:
        chosen = next((i for i in starts if f"(pid {pid})" in lines[i]), chosen)
    ends = [i for i in starts if i > chosen]
    return lines[chosen : ends[0] if ends else len(lines)]


def _exit_line(attempt: list[str], port: int) -> re.Match | None:
    exits = [m for line in attempt if (m := re.search(rf"\[serve {port}\] exit -?\d+: (.*)$", line))]
    return exits[-1] if exits else None


def start_failure(lines: list[str] | None, port: int, pid: int | None = None, status_text: str = "") -> str:
    """Why a start failed, from the unit's journal lines: the launcher's exit line of that run (its reason), else
    its last STATUS= (systemd's StatusText) or its last line; and the engine's own root-cause error when the
    launcher did not quote it (vLLM's other lines are skipped), from that run only."""
    tag = f"[serve {port}]"
    attempt = _attempt(lines or [], port, pid)
    exit_line = _exit_line(attempt, port)
    mine = [line.split(tag, 1)[1].strip() for line in attempt if tag in line]
    if exit_line is not None:
        reason = exit_line.group(1)
    elif status_text:
        reason = f"the launcher's last status: {status_text}"
    elif mine:
        reason = f"the launcher's last line: {mine[-1]}"
    else:
        reason = "(journal unavailable)" if lines is None else "(no launcher lines in the journal)"
    error = enginelog.engine_error(line for line in attempt if tag not in line)
    if error is None or error in reason:  # the launcher's exit line already quotes it
        return reason
    return f"{reason}; the engine's last error: {error}"


def _failed_props(unit: str) -> dict[str, str]:
    """What systemd kept of the run that just failed; {} when it cannot be asked."""
    try:
        return show(unit, "ExecMainPID", "StatusText")
    except SystemdError:
        return {}


def why_not_started(unit: str, said: str) -> str:
    """An instance: its launcher's reason (journal, else its last STATUS=); another unit: its StatusText, else
    systemctl's first sentence (the rest only points at `systemctl status`)."""
    props = _failed_props(unit)  # first: a restart 5 s later replaces ExecMainPID and StatusText
    status_text = props.get("StatusText", "")
    m = INSTANCE_UNIT.fullmatch(unit)
    if m is None:
        first = said.splitlines()[0] if said else "(systemctl said nothing)"
        return status_text or first
    port, pid = int(m.group(1)), int(props.get("ExecMainPID") or 0) or None
    lines = journal_lines(port)
    for pause in JOURNAL_SETTLE:  # the exit line may reach the journal a moment after systemd saw the exit
        if lines is None or _exit_line(_attempt(lines, port, pid), port) is not None:
            break
        time.sleep(pause)
        lines = journal_lines(port)
    return start_failure(lines, port, pid, status_text)


def show(unit: str, *props: str) -> dict[str, str]:
    """`systemctl show UNIT -p ...` as a dict (any unit, not only instances)."""
    r = _systemctl("show", unit, *[f"--property={p}" for p in props], timeout=15)
    if r.returncode != 0:
        raise SystemdError(f"systemctl show {unit}: {r.stderr.strip()}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def run_verb(verb: str, unit: str, timeout: float = 900) -> None:
    """systemctl start/restart/enable/... of any unit. A failed start or restart raises StartFailed (the unit's
    reason and its journal command); any other verb's error carries systemctl's own words."""
    try:
        r = _systemctl(verb, unit, timeout=timeout)
    except SystemdTimeout as exc:
        if verb in START_VERBS:
            raise StartFailed(unit, str(exc)) from None
        raise
    if r.returncode == 0:
        return
    said = r.stderr.strip() or r.stdout.strip()
    if verb in START_VERBS:
        raise StartFailed(unit, why_not_started(unit, said))
    raise SystemdError(f"systemctl {verb} {unit} failed: {said}")
