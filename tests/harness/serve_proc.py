"""Run `ernie-ops serve PORT` as a real process with a test NOTIFY_SOCKET, and inspect what it owns."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.harness import budget
from tests.harness.notify import NotifySocket


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclass
class ServeProcess:
    proc: subprocess.Popen
    notify: NotifySocket
    log_path: Path
    port: int

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def engine(self) -> psutil.Process:
        """The vLLM API server: the launcher's only child."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = psutil.Process(self.proc.pid).children()
            if kids:
                return kids[0]
            time.sleep(0.1)
        raise AssertionError("the launcher started no engine")

    def group(self) -> list[int]:
        """PIDs in the engine's process group."""
        from ernie_ops.serving import procs

        return procs.group_members(self.engine().pid)

    def wait_ready(self, timeout: float = 600) -> float:
        """Arrival time of READY=1; fails at once if the launcher exits first."""
        deadline = time.monotonic() + timeout
        msg = None
        while msg is None and time.monotonic() < deadline and self.proc.poll() is None:
            msg = self.notify.wait_for("READY", "1", timeout=1.0)
        if msg is None:
            raise AssertionError(f"no READY=1 within {timeout}s; launcher exit={self.proc.poll()}\n{self.log[-4000:]}")
        return msg.at

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 120) -> int:
        """Stop by PID (TERM, then KILL of the launcher and its engine group) and release the socket."""
        pgids: set[int] = set()
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            pgids = {os.getpgid(c.pid) for c in psutil.Process(self.proc.pid).children()}
        self.terminate()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self.notify.close()
        return code


def start(
    config_path: Path,
    port: int,
    workdir: Path,
    watchdog_usec: int | None = 1_500_000,
    extra_env: dict | None = None,
    python: str | None = None,
) -> ServeProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    sock = workdir / f"notify-{port}.sock"
    sock.unlink(missing_ok=True)
    notify = NotifySocket(sock)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "NOTIFY_SOCKET"))}
    env["NOTIFY_SOCKET"] = str(sock)
    if watchdog_usec:
        env["WATCHDOG_USEC"] = str(watchdog_usec)
    env.update(extra_env or {})
    log_path = workdir / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", "ernie_ops", "--config", str(config_path), "serve", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    if "STUB_MODE" not in (extra_env or {}):  # a stub engine (a fault vLLM cannot produce) costs no engine start
        budget.count("engines")
    return ServeProcess(proc=proc, notify=notify, log_path=log_path, port=port)
