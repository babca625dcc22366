"""The engine's own reason for failing, found in its output: for `systemd.start`'s error and the launcher's exit line.

vLLM prints each process's log lines as `(Worker pid=9231) ERROR 12-01 23:42:03 [file.py:953] text` and
the API server's traceback bare on stderr. A failed start ends with wrapper exceptions ("Engine core
initialization failed. See root cause above."); the root cause is an earlier exception line, e.g.
`SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered` for a
truncated weights file. `engine_error` picks the last exception that is not such a wrapper.

Deaths by signal: the engine's sitecustomize (engine_site/) writes `ernie-ops engine-site: pid P: child NAME
(pid C) was killed by SIGILL` when a parent reaps a child killed by a signal; `killed` reads those lines and
`death_sentence` says what the signal means for an operator.

`Tee` passes the engine's output through to the launcher's stdout (the journal) line by line and keeps
the recent lines, so the launcher can name that error when the engine dies.
"""

from __future__ import annotations

import collections
import re
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

# (Worker pid=9231) ERROR 12-01 23:42:03 [multiproc_executor.py:953] message
_PREFIX = re.compile(
    r"^(?:\((?P<proc>[\w.-]+) pid=\d+\) )?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] )?"
    r"(?P<msg>.*)$"
)
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault)|Exception)): (?P<text>\S.*)$"
)
_WRAPPERS = ("see root cause above", "see stack trace for root cause")
MAX_LEN = 400
KEEP_LINES = 400  # enough for the longest start-up failure measured (226 lines, truncated weights)


# written by engine_site/sitecustomize.py (a unit test runs it and reads its real lines back)
_KILLED = re.compile(
    r"ernie-ops engine-site: pid \d+: child (?P<name>\S+) \(pid (?P<pid>\d+)\) was killed by (?P<signal>SIG[A-Z0-9]+|signal \d+)"
)
_ROLES = (("EngineCore", "engine core process"), ("Worker", "worker process"), ("APIServer", "API server process"))


@dataclass(frozen=True)
class Killed:
    """One engine process killed by a signal: `role` is what an operator calls it."""

    role: str  # "engine core process", "worker process", "API server process", "process"
    name: str  # vLLM's own name for it: EngineCore_DP0, VllmWorker-0 ("" for the API server)
    pid: int
    signal: str  # SIGILL, SIGKILL, ...

    def describe(self) -> str:
        who = f"{self.role} {self.name}" if self.name else self.role
        return f"the engine's {who} (pid {self.pid}) was killed by {self.signal}"


def role_of(name: str) -> str:
    return next((role for key, role in _ROLES if key in name), "process")


def killed(lines: Iterable[str]) -> list[Killed]:
    """The engine's processes killed by a signal, in the order their parents saw it (the first is the cause)."""
    found = []
    for line in lines:
        m = _KILLED.search(line)
        if m:
            found.append(Killed(role_of(m.group("name")), m.group("name"), int(m.group("pid")), m.group("signal")))
    return found


def signal_name(returncode: int) -> str:
    """subprocess's -N as SIGxxx."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def cause(reported: list[Killed], api_server_pid: int, returncode: int | None) -> Killed | None:
    """The death that ended the engine: the first one its processes reported (read before the launcher
    killed the leftovers), else the API server's own, when a signal ended it (it is the launcher's child)."""
    if reported:
        return reported[0]
    if returncode is not None and returncode < 0:
        return Killed("API server process", "", api_server_pid, signal_name(returncode))
    return None


def death_sentence(k: Killed, memory_settings: str) -> str:
    """Which process, which signal, and what that signal usually means on an inference host."""
    meaning = {
        "SIGILL": "the CPU refused an instruction (an instruction set this CPU or VM does not allow, such as AMX "
        "without the kernel's permission, or AVX-512 hidden by the hypervisor)",
        "SIGKILL": "a SIGKILL from outside the engine, most likely the kernel's out-of-memory killer "
        f"(`journalctl -k | grep -i oom` shows it): lower {memory_settings}, run fewer instances here or add memory",
        "SIGSEGV": "a crash in native code (the process's Python stack is in the journal just above)",
        "SIGBUS": "a crash in native code, often a file or /dev/shm segment that shrank under it (stack in the journal above)",
        "SIGABRT": "an abort in native code (the process's Python stack is in the journal just above)",
    }.get(k.signal)
    return f"{k.describe()}: {meaning}" if meaning else k.describe()


def _split(line: str) -> tuple[str | None, str]:
    m = _PREFIX.match(line.rstrip("\r\n"))
    return (m.group("level"), m.group("msg")) if m else (None, line)


def engine_error(lines: Iterable[str]) -> str | None:
    """The engine's root-cause error line, short and whole ("SafetensorError: ..."), or None if it printed none.

    Preference: the last exception line that is not a wrapper; then the last wrapper; then the last
    ERROR-level log line that is not part of a traceback. A pydantic-style exception whose detail is on
    the next indented line gets that line appended.
    """
    msgs = [_split(line) for line in lines]
    causes: list[str] = []
    wrappers: list[str] = []
    logged: list[str] = []
    for i, (level, msg) in enumerate(msgs):
        m = _EXCEPTION.match(msg)
        if m:
            text = f"{m.group('type').rsplit('.', 1)[-1]}: {m.group('text').strip()}"
            detail = _detail(msgs, i + 1)
            if detail:
                text = f"{text}: {detail}"
            (wrappers if any(w in text.lower() for w in _WRAPPERS) else causes).append(text)
        elif level in ("ERROR", "CRITICAL") and msg.strip() and not msg.startswith((" ", "Traceback")):
            logged.append(msg.strip())
    for found in (causes, wrappers, logged):
        if found:
            return _shorten(found[-1])
    return None


def _detail(msgs: list[tuple[str | None, str]], i: int) -> str | None:
    """The indented line under an exception line (pydantic's ValidationError puts the reason there)."""
    if i < len(msgs):
        msg = msgs[i][1]
        if msg.startswith((" ", "\t")) and not msg.lstrip().startswith(("File ", "For further information")) and msg.strip():
            return msg.strip()
    return None


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 3] + "..."


class Tee:
    """Copy `source` (the engine's merged stdout/stderr pipe) to `sink` line by line; keep the last lines."""

    def __init__(self, source: BinaryIO, sink: BinaryIO, keep: int = KEEP_LINES):
        self.source = source
        self.sink = sink
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.kill_lines: list[str] = []  # kept whole: a shutdown's noise must not push the cause out of `lines`
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="engine-output", daemon=True)

    def start(self) -> Tee:
        """The thread is born with every signal blocked, so the kernel delivers the launcher's stop signals
        to the main thread, as before the thread existed: a signal taken by this thread would run the
        handler in the main thread at an arbitrary bytecode, e.g. inside sdnotify's bare `except:` that
        the main thread's own mask guards, and the stop request would vanish (seen: 2 drains in 9)."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return self

    def _run(self) -> None:
        sink_ok = True
        for line in iter(self.source.readline, b""):
            raw = line if line.endswith(b"\n") else line + b"\n"  # a last line cut short must not run into ours
            text = raw.decode("utf-8", "replace")
            with self.lock:
                self.lines.append(text)
                if _KILLED.search(text):
                    self.kill_lines.append(text)
            if sink_ok:
                try:
                    self.sink.write(raw)
                    self.sink.flush()
                except (OSError, ValueError):
                    sink_ok = False  # the journal went away: keep draining, or the engine blocks on a full pipe
        self.source.close()

    def join(self, timeout: float) -> None:
        """Wait for the end of the output (every process that held the pipe has exited), at most `timeout`."""
        self.thread.join(timeout)

    def recent(self) -> list[str]:
        with self.lock:
            return list(self.lines)

    def engine_error(self) -> str | None:
        return engine_error(self.recent())

    def killed(self) -> list[Killed]:
        with self.lock:
            return killed(self.kill_lines)
