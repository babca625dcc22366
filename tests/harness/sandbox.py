"""A real systemd as PID 1 of a throw-away namespace sandbox: the tests' "bare-metal host".

The shell scripts beside this file do the mounts (see boot.sh for why each exists); this module
boots, drives (`systemctl`, `journalctl` through nsenter) and always tears down by PID.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ernie_ops.stats import metrics
from tests.harness import budget

HERE = Path(__file__).resolve().parent / "sandbox"
BASE_ROOT = Path("/var/tmp")  # never /tmp: the sandbox's own /tmp is a tmpfs, the host's must stay untouched


def why_unavailable() -> str | None:
    """A reason the sandbox cannot run here, or None."""
    if os.geteuid() != 0:
        return "the systemd sandbox needs root (mount and pid namespaces)"
    if not Path("/lib/systemd/systemd").exists():
        return "systemd is not installed (apt-get install systemd)"
    return None


@dataclass
class Sandbox:
    base: Path
    pid: int

    def run(self, cmd: str | list[str], check: bool = True, timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command inside (mount + pid namespace of the sandbox's PID 1)."""
        argv = cmd if isinstance(cmd, list) else ["sh", "-c", cmd]
        proc = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", "-n", "--", *argv],
            capture_output=True, text=True, timeout=timeout, input=input,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"in sandbox: {shlex.join(argv)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def spawn(self, argv: list[str]) -> subprocess.Popen:
        """Start a command inside without waiting (stdout/stderr piped, text)."""
        return subprocess.Popen(
            ["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", "-n", "--", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    @staticmethod
    def signal_spawned(proc: subprocess.Popen, sig: int) -> None:
        """Signal the command itself: nsenter does not forward signals to the child it forked."""
        import psutil

        try:
            for child in psutil.Process(proc.pid).children():
                child.send_signal(sig)
        except psutil.NoSuchProcess:
            pass

    def systemctl(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        return self.run(["systemctl", "--no-pager", *args], check=check, timeout=timeout)

    def show(self, unit: str, prop: str) -> str:
        return self.systemctl("show", "-p", prop, "--value", unit).stdout.strip()

    def journal(self, unit: str) -> str:
        return self.run(["journalctl", "--no-pager", "-o", "cat", "-u", unit], check=False).stdout

    def write(self, path: str, content: str, mode: str = "0644") -> None:
        self.run(
            f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {shlex.quote(path)} && chmod {mode} {shlex.quote(path)}",
            input=content,
        )

    def host_pid(self, pid_inside: int) -> int:
        """Map a PID seen inside the sandbox to the host's PID (for signals from the test)."""
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    if len(ids) >= 2 and ids[-1] == str(pid_inside) and self._in_sandbox(int(ids[0])):
                        return int(ids[0])
        raise LookupError(f"no host process for sandbox pid {pid_inside}")

    def _in_sandbox(self, host_pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{host_pid}/ns/pid") == os.readlink(f"/proc/{self.pid}/ns/pid")
        except OSError:
            return False

    def requests_running(self, port: int) -> float:
        """vLLM's `num_requests_running` of the instance on `port`, read inside."""
        text = self.run(["curl", "-sf", "-m", "5", f"http://127.0.0.1:{port}/metrics"]).stdout
        assert "vllm:num_requests_running" in text, f"no vllm:num_requests_running in {port}'s /metrics: {text[:300]}"
        return metrics.parse(text).running

    @contextlib.contextmanager
    def slowed(self, port: int, share: float, python: str):
        """Instance `port`'s engine held `share` of the time by tests/harness/throttle.py run inside with `python`
        (SIGSTOP/SIGCONT of its engine core: a real slowdown, as a real model's long replies take). It lets the
        engine run again as it ends; a host powered off meanwhile took the throttle with it."""
        proc = self.spawn([python, "/srv/share/tests/harness/throttle.py", self.show(f"ernie-vllm@{port}.service", "MainPID"), str(share)])
        try:
            assert proc.stdout.readline().startswith("holding "), proc.communicate(timeout=30)
            yield
        finally:
            self.signal_spawned(proc, signal.SIGTERM)
            proc.communicate(timeout=30)

    def engine_starts(self) -> int:
        """How many times systemd started an ernie-vllm@ unit here (its journal; 0 once the host is gone)."""
        r = self.run(["journalctl", "--no-pager", "-o", "cat", "_PID=1"], check=False, timeout=60)
        return sum(line.startswith("Starting ernie-vllm@") for line in r.stdout.splitlines())

    def _count_engines(self) -> None:
        if Path(f"/proc/{self.pid}").exists():
            budget.count("engines", self.engine_starts())

    def power_off(self) -> None:
        """Pull the plug: its PID 1 killed, and with it every process and its network namespace; no unit stops."""
        self._count_engines()
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(f"/proc/{self.pid}").exists():
            time.sleep(0.1)

    def down(self) -> None:
        self._count_engines()
        subprocess.run([str(HERE / "down.sh"), str(self.base)], check=False, timeout=60)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.base)], check=False)


def up(name: str, share: Path, units: Path, binds_ro: dict[str, str] | None = None, binds_rw: dict[str, str] | None = None,
       upper_on_disk: bool = False, net: bool = False, timeout: float = 60) -> Sandbox:  # fmt: skip
    """Boot a sandbox; `binds_ro` maps host paths to paths inside, `binds_rw` overlay paths to other paths inside.

    `net=True` gives it its own network namespace (only `lo`), so its ports never meet the host's.
    """
    base = BASE_ROOT / f"ernie-ops-sandbox-{name}-{os.getpid()}"
    env = dict(os.environ)
    env["EXTRA_RO"] = " ".join(f"{src}:{dst}" for src, dst in (binds_ro or {}).items())
    env["EXTRA_RW"] = " ".join(f"{src}:{dst}" for src, dst in (binds_rw or {}).items())
    env["UPPER_ON_DISK"] = "1" if upper_on_disk else "0"
    env["UNSHARE_EXTRA"] = "--net" if net else ""
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(HERE / "up.sh"), str(base), str(share), str(units)], capture_output=True, text=True, env=env, timeout=timeout
    )
    if proc.returncode != 0:
        log = (base / "unshare.log").read_text() if (base / "unshare.log").exists() else ""
        subprocess.run([str(HERE / "down.sh"), str(base)], check=False)
        raise RuntimeError(f"sandbox did not boot in {time.monotonic() - t0:.1f}s: {proc.stderr}\n{log}")
    budget.count("hosts")
    return Sandbox(base=base, pid=int(proc.stdout.strip()))
