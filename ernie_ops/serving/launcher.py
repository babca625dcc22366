"""`ernie-ops serve PORT`: the ExecStart of `ernie-vllm@.service`.

It runs vLLM as a child process group and speaks sd_notify for it, because vLLM does not:
- READY=1 only once /health is 200, /v1/models lists the configured model and one real
  completion succeeded, so `systemctl start` returns exactly when the model can serve;
- WATCHDOG=1 only while /health answers, so systemd restarts a hung engine;
- on SIGTERM, STOPPING=1, then vLLM's own drain (--shutdown-timeout), then SIGKILL of the
  whole group after a bounded grace (vLLM ignores SIGTERM while loading), then removal of the
  shared-memory files its own processes held;
- a non-zero exit whenever the engine ends without being asked to, including vLLM's API
  server exiting 0 after EngineDeadError, so Restart=on-failure acts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import sdnotify

from ernie_ops.config import Config
from ernie_ops.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ProbeFailed
from ernie_ops.serving import engine, enginelog, manifest, probe, procs

log = logging.getLogger("ernie_ops.serve")

DEFAULT_WATCHDOG_PING = 5.0  # seconds between pings when systemd gives no WATCHDOG_USEC
STARTUP_KILL_GRACE = 5.0  # a loading engine ignores SIGTERM (measured > 90 s): bound the wait
# vLLM binds ZMQ IPC sockets at $TMPDIR/<uuid4>; a Unix socket path holds at most 107 bytes.
MAX_TMPDIR_LEN = 107 - 1 - 36
OUTPUT_DRAIN_SECONDS = 2.0  # after the group died: its last output lines still in the pipe
REAP_GRACE_SECONDS = 3.0  # after the engine died: time for its leftovers to end by themselves (see _reap)
EXIT_REAP_SECONDS = 0.5  # after a failed probe: time for a dying engine's exit to become visible (see _exited_meanwhile)
PING_MARGIN = 2.0  # seconds kept back from the watchdog's budget to deliver a ping after a slow /health answer

MODEL_ROLE_COMMAND = "ansible-playbook site.yml --tags model"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGABRT)  # SIGABRT: systemd's WatchdogSignal


def probe_timeout(request_timeout: float, interval: float, watchdog_seconds: float | None, since_ping: float) -> float:
    """How long a serving engine's /health probe may wait. A slow answer is an answer: with systemd's watchdog it
    waits up to what is left of WatchdogSec since the last ping (less PING_MARGIN), never less than it did before
    (health.request_timeout_seconds, at most a ping interval). So only an engine that answers nothing for a whole
    WatchdogSec is killed: a fresh clone's busy engine, its API server slower than 5 s for 15 s on two loaded cores,
    was killed while serving (docs/operate.md, Watchdog)."""
    floor = min(request_timeout, interval)
    if watchdog_seconds is None:
        return floor
    return max(floor, watchdog_seconds - since_ping - PING_MARGIN)


class _StopRequested(BaseException):
    """Raised from the signal handler. A BaseException, like KeyboardInterrupt, so that library code
    catching Exception cannot swallow a stop request (sdnotify's bare `except:` is handled in `_notify`)."""

    def __init__(self, signum: int):
        self.signum = signum


@dataclass
class ServeOutcome:
    exit_code: int
    reason: str
    ready_at: float | None = None
    removed_shm: tuple[str, ...] = ()


class Launcher:
    """One engine's life: start, gate, notify, watch, stop. `run()` returns the process exit code."""

    def __init__(
        self,
        cfg: Config,
        port: int,
        command: engine.EngineCommand | None = None,
        notifier: sdnotify.SystemdNotifier | None = None,
        env: dict[str, str] | None = None,
    ):
        self.cfg = cfg
        self.port = port
        self.env = dict(os.environ if env is None else env)
        self.command = command or engine.build_command(cfg, port, env=self.env)
        self.notifier = notifier or sdnotify.SystemdNotifier()
        self.base = probe.base_url(port)
        self.proc: subprocess.Popen | None = None
        self.output: enginelog.Tee | None = None  # the engine's output, passed to the journal through us
        self.shm_seen: set[str] = set()
        self.ready = False
        self.stopping = False
        self.outcome: ServeOutcome | None = None

    # -- sd_notify -------------------------------------------------------------------------
    def _notify(self, *fields: str) -> None:
        # sdnotify's notify() has a bare `except:`: a stop request raised by our signal handler inside it
        # would vanish. Hold the stop signals for the microseconds of the send; they arrive right after.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.notifier.notify("\n".join(fields))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _status(self, text: str) -> None:
        log.info("[serve %s] %s", self.port, text)
        self._notify(f"STATUS={text}")

    def watchdog_seconds(self) -> float | None:
        """systemd's WatchdogSec for this process (WATCHDOG_USEC), None without one."""
        usec = self.env.get("WATCHDOG_USEC")
        pid = self.env.get("WATCHDOG_PID")
        if usec and usec.isdigit() and (not pid or pid == str(os.getpid())):
            return int(usec) / 1e6
        return None

    def watchdog_interval(self) -> float:
        """Ping at a third of systemd's WatchdogSec so one slow /health does not trip it."""
        seconds = self.watchdog_seconds()
        return max(0.1, seconds / 3) if seconds is not None else DEFAULT_WATCHDOG_PING

    # -- main ------------------------------------------------------------------------------
    def run(self) -> int:
        log.info("[serve %s] launcher started (pid %d)", self.port, os.getpid())  # systemd.ATTEMPT_MARKER
        previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        try:
            self.outcome = self._run()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        log.info("[serve %s] exit %d: %s", self.port, self.outcome.exit_code, self.outcome.reason)
        return self.outcome.exit_code

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stopping:
            # Already stopping: a second TERM/INT must not break the drain; an ABRT (watchdog) kills at once.
            if signum == signal.SIGABRT:
                self._kill_now(signum)
            return
        self.stopping = True
        # Raising interrupts a probe blocked in a socket call, so a stop never waits for a timeout.
        raise _StopRequested(signum)

    def _run(self) -> ServeOutcome:
        try:
            preflight = self._preflight()  # inside: hashing the weights takes a while, a stop must end it
            if preflight:
                return preflight
            self._start()
            ready = self._wait_until_servable()
            if ready is not None:
                return ready
            return self._serve()
        except _StopRequested as stop:
            return self._stop(stop.signum)

    def _kill_now(self, signum: int) -> None:
        log.error("[serve %s] %s during the stop: SIGKILL of the engine group", self.port, signal.Signals(signum).name)
        if self.proc is not None:
            procs.signal_group(self.proc.pid, signal.SIGKILL)

    def _preflight(self) -> ServeOutcome | None:
        """Fail fast, with exit 2 (RestartPreventExitStatus), on problems a restart cannot fix."""
        model = Path(self.cfg.model.path)
        if not (model / "config.json").is_file():
            return ServeOutcome(EXIT_USAGE, f"model.path {model} has no config.json; provision the weights there or fix model.path")
        dirs = self.command.dirs
        if dirs is not None and len(str(dirs.tmp)) > MAX_TMPDIR_LEN:
            return ServeOutcome(
                EXIT_USAGE,
                f"TMPDIR {dirs.tmp} is {len(str(dirs.tmp))} characters; vLLM's IPC socket paths need it at most "
                f"{MAX_TMPDIR_LEN} (Unix socket limit): shorten paths.cache_dir",
            )
        cpus = self.command.cpus
        if cpus and not cpus <= os.sched_getaffinity(0):
            allowed = ",".join(map(str, sorted(os.sched_getaffinity(0))))
            return ServeOutcome(
                EXIT_USAGE,
                f"instance {self.port} is bound to cores {sorted(cpus)}, but only {allowed} exist here: fix instances[].cpu_cores",
            )
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((engine.LISTEN_HOST, self.port))
            except OSError as exc:
                return ServeOutcome(EXIT_FAILED, f"port {self.port} on {engine.LISTEN_HOST} is taken ({exc.strerror}); stop what holds it")
        return self._check_manifest(model)

    def _check_manifest(self, model: Path) -> ServeOutcome | None:
        """The weights against the model role's SHA256SUMS, before a minute of loading finds them short."""
        self._status(f"checking {model} against {manifest.MANIFEST_NAME}")
        try:
            report = manifest.check(model)
        except manifest.ManifestError as exc:
            return ServeOutcome(EXIT_USAGE, f"{exc}; re-run the model role ({MODEL_ROLE_COMMAND}) to rewrite it")
        if report is None:
            log.info("[serve %s] %s has no %s (a hand-made model directory): files not checked", self.port, model, manifest.MANIFEST_NAME)
            return None
        if not report.ok:
            remedy = f"re-run the model role ({MODEL_ROLE_COMMAND}) or copy it again"
            return ServeOutcome(EXIT_USAGE, manifest.describe(model, report, remedy))
        log.info(
            "[serve %s] %d file(s) match %s (%s hashed in %.1fs)",
            self.port, report.files, manifest.MANIFEST_NAME, manifest.human_size(report.bytes_hashed), report.seconds,
        )  # fmt: skip
        return None

    def _start(self) -> None:
        dirs = self.command.dirs
        if dirs is not None:
            shutil.rmtree(dirs.tmp, ignore_errors=True)  # sockets and vllm_dist_* of a previous run
            for d in dirs.all():
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self.command.env.get("VLLM_CACHE_ROOT") == str(dirs.vllm_cache):  # not moved by vllm.env
                link_shared_caches(dirs.links())
        self._status(f"starting engine ({self.command.accelerator}): {' '.join(self.command.argv)}")
        cpus = self.command.cpus
        self.proc = subprocess.Popen(
            self.command.argv,
            env={**self.env, **self.command.env},
            start_new_session=True,  # own process group: the whole engine can be signalled at once
            stdin=subprocess.DEVNULL,
            # through a pipe to our stdout (the journal), so the launcher can name the engine's own error
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # inherited by every process and thread the engine starts (the launcher has no threads yet)
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        self.output = enginelog.Tee(self.proc.stdout, sys.stdout.buffer).start()
        self._status(f"loading model {self.cfg.model.path} (engine pid {self.proc.pid})")

    def _track_shm(self) -> None:
        if self.proc is not None:
            self.shm_seen |= procs.shm_files_of(procs.group_members(self.proc.pid))

    def _wait_until_servable(self) -> ServeOutcome | None:
        """Poll until all three tiers pass; returns an outcome only if the engine died first."""
        health = self.cfg.health
        interval = health.poll_interval_seconds
        alive_logged = False
        last_problem = ""
        next_track = 0.0
        with httpx.Client() as client:
            while True:
                if self.proc.poll() is not None:
                    return self._engine_died("while loading")
                now = time.monotonic()
                if now >= next_track:
                    self._track_shm()
                    next_track = now + 1.0
                if probe.alive(client, self.base, health.request_timeout_seconds):
                    if not alive_logged:
                        self._status("engine answers /health; checking model list and a real completion")
                        alive_logged = True
                    try:
                        result = probe.check_servable(client, self.base, self.cfg.model.served_name, health)
                    except ProbeFailed as exc:
                        if str(exc) != last_problem:
                            log.warning("[serve %s] not servable yet: %s", self.port, exc)
                            last_problem = str(exc)
                    else:
                        self.ready = True
                        self._track_shm()
                        self._notify("READY=1", f"STATUS=serving {self.cfg.model.served_name} on {self.base}")
                        log.info(
                            "[serve %s] READY: %s serves %s; smoke completion ok in %.2fs",
                            self.port, self.base, self.cfg.model.served_name, result.seconds,
                        )  # fmt: skip
                        return None
                time.sleep(interval)

    def _serve(self) -> ServeOutcome:
        """Ping the watchdog while /health answers; leave when the engine exits."""
        interval, watchdog = self.watchdog_interval(), self.watchdog_seconds()
        healthy, pinged = True, time.monotonic()  # READY came just now, after a real completion
        with httpx.Client() as client:
            while True:
                if self.proc.poll() is not None:
                    return self._engine_died("while serving")
                wait = probe_timeout(self.cfg.health.request_timeout_seconds, interval, watchdog, time.monotonic() - pinged)
                if probe.alive(client, self.base, wait):
                    self._notify("WATCHDOG=1")
                    pinged = time.monotonic()
                    if not healthy:
                        self._status("engine answers /health again; watchdog pings resumed")
                    healthy = True
                elif self._exited_meanwhile():
                    return self._engine_died("while serving")
                elif healthy:
                    healthy = False
                    log.warning("[serve %s] /health does not answer: withholding watchdog pings", self.port)
                    self._notify("STATUS=engine does not answer /health; watchdog pings withheld")
                self._track_shm()
                self._sleep_while_running(interval)

    def _exited_meanwhile(self) -> bool:
        """A failed probe may be the engine dying: its socket closes a moment before its exit can be reaped
        (seen in e2e: a kill -9 was first logged as 'withholding watchdog pings'). Give it that moment."""
        try:
            self.proc.wait(timeout=EXIT_REAP_SECONDS)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _sleep_while_running(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    # -- endings ---------------------------------------------------------------------------
    def _engine_died(self, when: str) -> ServeOutcome:
        code = self.proc.returncode
        hint = " (vLLM's API server exits 0 after the engine core dies)" if code == 0 else ""
        log.error("[serve %s] engine exited with code %s %s without being asked to stop%s", self.port, code, when, hint)
        # before the reap: what our SIGTERM to the leftovers kills is not the cause
        kills = self.output.killed() if self.output is not None else []
        removed = self._reap(grace=REAP_GRACE_SECONDS)  # also waits for the end of its output
        error = self.output.engine_error() if self.output is not None else None
        reason = f"engine exited with code {code} {when}"
        if (death := self._death(kills)) is not None:
            reason += f": {death}"  # in the exit line and STATUS= (systemd.start_failure quotes the exit line)
        reason += f"; its last error: {error}" if error else ""
        self._notify(f"STATUS={reason}")
        return ServeOutcome(EXIT_FAILED, reason, removed_shm=removed)

    def _death(self, kills: list[enginelog.Killed]) -> str | None:
        """Which engine process a signal killed first, and what the signal means; None if none was."""
        first = enginelog.cause(kills, self.proc.pid, self.proc.returncode)
        if first is None:
            return None
        v = self.cfg.vllm
        memory = f"vllm.max_num_seqs ({v.max_num_seqs}) or vllm.max_model_len ({v.max_model_len})"
        if self.command.accelerator == "cpu":
            memory = f"vllm.cpu_kvcache_space_gib ({v.cpu_kvcache_space_gib} GiB), " + memory
        return enginelog.death_sentence(first, memory)

    def _stop(self, signum: int) -> ServeOutcome:
        name = signal.Signals(signum).name
        if signum == signal.SIGABRT:
            # systemd's WatchdogSignal: the engine is hung, a drain would wait for nothing.
            log.error("[serve %s] %s (watchdog timeout): killing the engine without drain", self.port, name)
            removed = self._reap()
            return ServeOutcome(EXIT_FAILED, "watchdog timeout", removed_shm=removed)
        self._notify("STOPPING=1", f"STATUS=stopping on {name}")
        if self.proc is None:
            return ServeOutcome(EXIT_OK, f"stopped on {name} before the engine started")
        if self.ready:
            drain = self.cfg.vllm.shutdown_drain_seconds
            bound = drain + self.cfg.vllm.stop_grace_seconds
            log.info(
                "[serve %s] %s: draining in-flight requests (vLLM --shutdown-timeout %ss, kill after %.0fs)", self.port, name, drain, bound
            )
            self._send(signal.SIGTERM)
        else:
            bound = min(STARTUP_KILL_GRACE, self.cfg.vllm.stop_grace_seconds)
            log.info("[serve %s] %s while loading: SIGTERM, SIGKILL of the group after %.0fs", self.port, name, bound)
            procs.signal_group(self.proc.pid, signal.SIGTERM)
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout=bound)
            log.info("[serve %s] engine exited with code %s after %.1fs", self.port, self.proc.returncode, time.monotonic() - t0)
        except subprocess.TimeoutExpired:
            log.warning("[serve %s] engine still running after %.0fs: SIGKILL of its process group", self.port, bound)
        removed = self._reap()
        return ServeOutcome(EXIT_OK, f"stopped on {name}", removed_shm=removed)

    def _send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def _reap(self, grace: float = 0.0) -> tuple[str, ...]:
        """Kill what is left of the group, then remove exactly the shared memory it held.

        `grace`: SIGTERM first and wait that long. After the API server died, its orphans (engine core,
        worker) end on SIGTERM, and multiprocessing's resource tracker, which ignores SIGTERM, then sees
        its pipe close and unlinks the named semaphores it registered; no process maps those, so only
        the tracker can find them (measured: one /dev/shm/sem.mp-* left per engine death with SIGKILL).
        """
        if self.proc is None:
            return ()
        self._track_shm()
        pgid = self.proc.pid
        if grace and procs.signal_group(pgid, signal.SIGTERM):
            procs.wait_group_gone(pgid, grace)
        if procs.signal_group(pgid, 0) and not procs.kill_group(pgid):
            log.error("[serve %s] processes of group %s survive SIGKILL", self.port, pgid)
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
        if self.output is not None:
            self.output.join(OUTPUT_DRAIN_SECONDS)  # the group is gone: the pipe ends; its last lines reach the journal
        removed = procs.remove_files(self.shm_seen)
        if removed:
            log.info("[serve %s] removed %d shared-memory file(s) left by the engine", self.port, len(removed))
        if self.command.dirs is not None:
            shutil.rmtree(self.command.dirs.tmp, ignore_errors=True)
        return tuple(removed)


def link_shared_caches(links: dict[Path, Path]) -> None:
    """Point each link at its shared directory (a directory an older version left there is replaced: it is only
    a cache). A cache is never a reason not to start: a failure is a warning and the engine inspects afresh."""
    for link, target in links.items():
        try:
            target.mkdir(parents=True, exist_ok=True, mode=0o700)
            if link.is_symlink() and link.readlink() == target:
                continue
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.exists():
                shutil.rmtree(link)
            link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            link.symlink_to(target, target_is_directory=True)
        except OSError as exc:
            log.warning("cannot share %s through %s (%s): this start inspects the model class itself", target, link, exc)


def setup_logging() -> None:
    """One line per event on stdout: journald timestamps and tags it with the unit name."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger("ernie_ops")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def serve(cfg: Config, port: int, make_launcher: Callable[..., Launcher] = Launcher) -> int:
    cfg.instance(port)  # a port not in the config is a usage error, before anything starts
    return make_launcher(cfg, port).run()
