"""Who holds a TCP port on this host: for `status` (an inactive unit whose port still answers) and the
cutover's preflight (never route to a port some other process holds).

The listener's pid comes from psutil (installed wherever vLLM is: it is one of vLLM's dependencies),
which reads /proc/net/tcp{,6} and matches socket inodes in /proc/*/fd; a process of another user is
seen as bound without a pid unless the caller is root. Without psutil, a bind test still says
whether the port is taken.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

LISTEN_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Holder:
    port: int
    bound: bool
    pid: int | None = None
    name: str | None = None  # the process name, when the pid is known

    def describe(self) -> str:
        """`pid 1234 python3` or why the pid is not known; always with the command that shows it."""
        ss = f"`ss -ltnp sport = :{self.port}`"
        if self.pid is not None:
            return f"pid {self.pid}{f' {self.name}' if self.name else ''}, {ss}"
        return f"pid not visible to this user: run {ss} as root"


def port_free(host: str, port: int) -> bool:
    """Whether `port` can be bound on `host` now (what the chat app checks before it starts, too)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _bound_by_bind_test(port: int) -> bool:
    return not port_free(LISTEN_HOST, port)


def holder(port: int) -> Holder:
    """The process listening on `port` (any local address), if any."""
    try:
        import psutil
    except ImportError:
        return Holder(port, _bound_by_bind_test(port))
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return Holder(port, _bound_by_bind_test(port))
    listeners = [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    if not listeners:
        return Holder(port, _bound_by_bind_test(port))  # e.g. a socket in a network namespace /proc does not show
    pid = next((c.pid for c in listeners if c.pid), None)
    name = None
    if pid is not None:
        try:
            name = psutil.Process(pid).name()
        except psutil.Error:
            name = None
    return Holder(port, True, pid, name)


def foreign_holder(port: int, unit_active: str) -> Holder | None:
    """The holder of `port` when its unit is not the one that can hold it (not active, activating,
    reloading or deactivating); None when the port is free or the unit may own it. For the cutover:
    `if (h := ports.foreign_holder(target, systemd.state(target).active)): refuse, naming h.describe()`."""
    if unit_active in UNIT_MAY_HOLD:
        return None
    h = holder(port)
    return h if h.bound else None


UNIT_MAY_HOLD = frozenset({"active", "activating", "reloading", "deactivating"})
