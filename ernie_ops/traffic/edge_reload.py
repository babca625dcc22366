#!/usr/bin/python3
"""Reload the edge nginx (nginx/ernie-edge.conf) without losing a request of a client that never retries.

A reload closes every idle keep-alive connection at once; a client that sends on one at that instant gets a reset
before any byte (1-4 lost requests per reload, measured). The edge keeps client keep-alive on (a TLS handshake per
request costs twice the TTFT a network away), so its reloads (a renewed certificate, a new configuration) drain
first:
  1. `nginx -t`: a configuration nginx would refuse changes nothing, not even the drain;
  2. raise the drain flag: every HTTP/1.x response now says "Connection: close" and the client closes the
     connection it used (`ernie-edge/drain.conf`);
  3. wait the edge's keepalive_timeout (read from `nginx -T`): by then nginx's own timeout has closed every
     connection nobody used, as it does all day;
  4. `nginx -s reload`, then wait until every worker of before says "shutting down" (they accept nothing more),
     so no connection made during the drain is handed a keep-alive answer by a worker about to exit;
  5. lower the flag (always, also when a step failed).

Standard library only: edge hosts have no ernie-ops venv, the Ansible role copies this one file
(/usr/local/lib/ernie-ops/ernie-edge-reload), and ernie-edge.service's ExecReload runs it, so `systemctl reload
ernie-edge` (the role's handler, a certificate renewal hook) always drains.

usage: ernie-edge-reload --pid-file FILE [--flag FILE] [--nginx BINARY] [-- NGINX_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_FLAG = "/run/ernie-ops/edge-draining"
DEFAULT_NGINX = "/usr/sbin/nginx"
UPSTREAM_BLOCK = re.compile(r"(?:^|[;{}])\s*upstream\s+\S+\s*\{[^{}]*\}", re.M)
KEEPALIVE = re.compile(r"(?:^|[;{}])\s*keepalive_timeout\s+([0-9]+[a-z]*)", re.M)
UNITS = {"ms": 0.001, "": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
MARGIN_SECONDS = 1.0  # past the timeout: nginx's timer has fired for the last idle connection
WORKERS_TIMEOUT_SECONDS = 30.0


class ReloadError(Exception):
    """A sentence for the operator; the flag is down and the running nginx serves as before."""


def nginx_seconds(value: str) -> float:
    """nginx's time syntax for one unit: "20s", "20", "1m", "500ms"."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h|)", value)
    if not m:
        raise ValueError(f"not an nginx time: {value!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def drain_seconds(dump: str) -> float:
    """The longest clients' keepalive_timeout in `nginx -T`'s dump (comments and upstream blocks removed: there it
    times out the connections to the gateways, which a reload closes without a client noticing); 75 s (nginx's
    default) if none."""
    text = UPSTREAM_BLOCK.sub("", re.sub(r"#[^\n]*", "", dump))
    values = [nginx_seconds(v) for v in KEEPALIVE.findall(text)]
    return max(values, default=75.0)


def worker_pids(master: int, proc: Path = Path("/proc")) -> list[int]:
    """The master's children (its workers, cache loaders): from /proc/PID/stat's ppid field."""
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == master:
            out.append(int(d.name))
    return out


def is_settled(pid: int, proc: Path = Path("/proc")) -> bool:
    """A worker of before is gone, or says it is shutting down (then it accepts no connection and keeps none alive)."""
    try:
        title = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True
    return b"shutting down" in title or not title.startswith(b"nginx:")


@dataclass
class Host:
    """What the reload does to the machine; tests replace pieces."""

    nginx: list[str]  # binary and its arguments (-p, -c ...)
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    workers: Callable[[int], list[int]] = worker_pids
    settled: Callable[[int], bool] = is_settled
    log: Callable[[str], None] = field(default=lambda line: print(line, flush=True))

    def call(self, *args: str) -> subprocess.CompletedProcess:
        try:
            return self.run([*self.nginx, *args], capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise ReloadError(f"nginx binary {self.nginx[0]} not found") from None


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "(no output)"


def read_master(pid_file: Path) -> int:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise ReloadError(
            f"no nginx master: pid file {pid_file} is missing or empty; start the edge (systemctl start ernie-edge)"
        ) from None


def reload(host: Host, pid_file: Path, flag: Path) -> float:
    """Drain, reload, lower the flag; returns the seconds drained. Raises ReloadError with what to do."""
    test = host.call("-t")
    if test.returncode != 0:
        raise ReloadError(f"nginx -t refused the edge configuration, nothing was reloaded: {_tail(test.stderr)}")
    dump = host.call("-T")
    wait = drain_seconds(dump.stdout) + MARGIN_SECONDS
    master = read_master(pid_file)
    before = host.workers(master)
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    try:
        host.log(f"draining: every HTTP/1.x response says Connection: close for {wait:.0f}s, then nginx reloads")
        host.sleep(wait)
        r = host.call("-s", "reload")
        if r.returncode != 0:
            raise ReloadError(f"nginx -s reload failed, the edge serves as before: {_tail(r.stderr)}")
        deadline = host.monotonic() + WORKERS_TIMEOUT_SECONDS
        while not all(host.settled(pid) for pid in before):
            if host.monotonic() > deadline:
                raise ReloadError(
                    f"nginx did not retire its workers within {WORKERS_TIMEOUT_SECONDS:.0f}s of the reload (it keeps the old "
                    "configuration when the new one fails to load): see the edge's error log"
                )
            host.sleep(0.05)
    finally:
        flag.unlink(missing_ok=True)
    host.log("reloaded; keep-alive is back on")
    return wait


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ernie-edge-reload", description=__doc__.split("\n\n")[0])
    p.add_argument("--pid-file", required=True, type=Path, help="the edge master's pid file (ernie-edge.service's PIDFile)")
    p.add_argument("--flag", type=Path, default=Path(DEFAULT_FLAG), help=f"the drain flag of ernie-edge/drain.conf ({DEFAULT_FLAG})")
    p.add_argument("--nginx", default=DEFAULT_NGINX, help=f"the nginx binary (default {DEFAULT_NGINX})")
    p.add_argument("nginx_args", nargs="*", help="nginx's own arguments after --, e.g. -c /etc/ernie-ops/edge/nginx.conf")
    args = p.parse_args(argv)
    try:
        reload(Host([args.nginx, *args.nginx_args]), args.pid_file, args.flag)
    except ReloadError as exc:
        print(f"ernie-edge-reload: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
