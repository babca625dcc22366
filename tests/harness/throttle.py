"""A real slowdown of one vLLM instance: its engine core processes (the API server's descendants) are
stopped `share` of every 100 ms with SIGSTOP/SIGCONT, as a CPU quota would hold them. The API server
itself runs freely, so /health and /metrics answer at once and only generation is slow.

The e2e sandbox's cgroup2 has no controllers (systemd's CPUQuota= is not enforced there), so this stands
in for `systemctl set-property ernie-vllm@PORT CPUQuota=10%` on a real host.

As a program (inside a sandboxed host): python throttle.py MAIN_PID [SHARE]   -> until SIGINT/SIGTERM;
MAIN_PID is the unit's MainPID (the launcher); its child is the API server, whose descendants are slowed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import psutil


def engine_cores(api_server_pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(api_server_pid).children(recursive=True)]


def hold(pids: list[int], share: float, stop: threading.Event) -> None:
    def send(sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    try:
        while not stop.is_set():
            send(signal.SIGSTOP)
            time.sleep(0.1 * share)
            send(signal.SIGCONT)
            time.sleep(0.1 * (1 - share))
    finally:
        send(signal.SIGCONT)


def main() -> None:
    main_pid, share = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.9
    api_server = psutil.Process(main_pid).children()[0].pid
    pids = engine_cores(api_server)
    if not pids:
        raise SystemExit(f"pid {api_server} has no engine core child")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"holding {pids} {share:.0%} of each 100 ms", flush=True)
    hold(pids, share, stop)


if __name__ == "__main__":
    main()
