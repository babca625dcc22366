"""A real slowdown of one vLLM instance: its engine core processes (the API server's descendants) are
stopped `share` of every period (100 ms unless told) with SIGSTOP/SIGCONT, as a CPU quota would hold them. The API server
itself runs freely, so /health and /metrics answer at once and only generation is slow.

The e2e sandbox's cgroup2 has no controllers (systemd's CPUQuota= is not enforced there), so this stands
in for `systemctl set-property ernie-vllm@PORT CPUQuota=10%` on a real host.

As a program (inside a sandboxed host): python throttle.py MAIN_PID SHARE [UPSTREAM_FILE PORT] -> until SIGINT/
SIGTERM, or (with UPSTREAM_FILE and PORT) until nginx's include routed to PORT and then no longer does: slow
while it takes traffic, then its in-flight streams finish at full speed while it drains (else a drain of streams 10x slower
than usual runs past the cutover's drain bound). MAIN_PID is the unit's MainPID (the launcher); its child is
the API server, whose descendants are slowed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil


def engine_cores(api_server_pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(api_server_pid).children(recursive=True)]


def hold(pids: list[int], share: float, stop: threading.Event, routed: Callable[[], bool] = lambda: True, period: float = 0.1) -> None:
    """Stop `pids` for `share` of every `period` seconds; a request waits at most share * period for its first token."""

    def send(sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    took_traffic = False
    try:
        while not stop.is_set():
            now = routed()
            if took_traffic and not now:
                break  # it was routed and is no more: its streams finish at full speed while it drains
            took_traffic = took_traffic or now
            send(signal.SIGSTOP)
            time.sleep(period * share)
            send(signal.SIGCONT)
            time.sleep(period * (1 - share))
    finally:
        send(signal.SIGCONT)


@contextlib.contextmanager
def held(api_server_pid: int, share: float, period: float = 0.1, routed: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """The API server's engine cores held `share` of every `period` by a thread of this process while the block runs.
    Also what keeps a tiny model's stream flowing on a fast CPU: its engine core then made tokens faster than vLLM's
    API server reads them, whose output loop never yields while outputs wait, so a reply (and a client's disconnect)
    came through only at the end."""
    pids = engine_cores(api_server_pid)
    assert pids, f"pid {api_server_pid} has no engine core child"
    stop = threading.Event()
    thread = threading.Thread(target=hold, args=(pids, share, stop, routed, period), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def while_routed(upstream: Path, port: int) -> Callable[[], bool]:
    """True while nginx's include has a server line for `port`."""
    return lambda: f":{port} " in upstream.read_text()


def main() -> None:
    main_pid, share = int(sys.argv[1]), float(sys.argv[2])
    routed = while_routed(Path(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (lambda: True)
    api_server = psutil.Process(main_pid).children()[0].pid
    pids = engine_cores(api_server)
    if not pids:
        raise SystemExit(f"pid {api_server} has no engine core child")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"holding {pids} {share:.0%} of each 100 ms", flush=True)
    hold(pids, share, stop, routed)


if __name__ == "__main__":
    main()
