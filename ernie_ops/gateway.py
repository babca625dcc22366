"""nginx, the only place that decides where traffic goes: the upstream include, `nginx -t`, reload.

Truth is read, not remembered: the routed port is whatever `upstream.conf` says. The file is
replaced atomically (temp file + rename in the same dir), so nginx never reads half of it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.config import GatewayConfig
from ernie_ops.errors import ErnieOpsError

SERVER_LINE = re.compile(r"^\s*server\s+(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)\b([^;#]*);", re.M)
UPSTREAM_HEADER = "x-ernie-upstream"  # set by nginx/ernie-ops.conf on every response: which instance answered
HEADER = "# Written by `ernie-ops` (cutover / rollback) only; do not edit by hand.\n"


class GatewayError(ErnieOpsError):
    """nginx refused a config or a reload; carries nginx's own message."""


def render_upstream(port: int, previous: int | None = None) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    note = f"# active since {stamp}" + (f" (previous: {previous})" if previous else "") + "\n"
    return f"{HEADER}{note}server 127.0.0.1:{port} max_fails=0;\n"


def parse_ports(text: str) -> list[int]:
    """Ports of the active (non-backup, non-down) server lines."""
    return [int(m.group(1)) for m in SERVER_LINE.finditer(text) if not re.search(r"\b(backup|down)\b", m.group(2))]


class Gateway:
    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        self.upstream = Path(cfg.upstream_file)

    # -- reading ---------------------------------------------------------------------------
    def read_upstream(self) -> str:
        try:
            return self.upstream.read_text()
        except FileNotFoundError:
            raise GatewayError(f"upstream include {self.upstream} does not exist; provision nginx (Ansible role `nginx`)") from None

    def active_port(self) -> int | None:
        return self._single_port(self.read_upstream())

    def _single_port(self, text: str) -> int | None:
        ports = parse_ports(text)
        if len(ports) > 1:
            raise GatewayError(f"{self.upstream} routes to several ports {ports}; ernie-ops writes exactly one")
        return ports[0] if ports else None

    # -- nginx -----------------------------------------------------------------------------
    def _nginx(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        argv = [self.cfg.nginx_binary, *self.cfg.nginx_args, *args]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise GatewayError(f"nginx binary {self.cfg.nginx_binary} not found (gateway.nginx_binary)") from None
        except subprocess.TimeoutExpired:
            raise GatewayError(f"`{' '.join(argv)}` did not finish within {timeout:.0f}s") from None

    def test(self) -> None:
        """`nginx -t` of the whole config as it is on disk now."""
        r = self._nginx("-t")
        if r.returncode != 0:
            raise GatewayError(f"nginx -t failed: {_last_lines(r.stderr)}")

    def reload(self) -> None:
        """Graceful reload: in-flight requests finish on the old workers."""
        r = self._nginx("-s", "reload")
        if r.returncode != 0:
            raise GatewayError(f"nginx reload failed: {_last_lines(r.stderr)}")

    def apply(self) -> None:
        """What is on disk now goes live: `nginx -t`, then a graceful reload."""
        self.test()
        self.reload()

    # -- writing ---------------------------------------------------------------------------
    def write_upstream(self, text: str) -> None:
        """Atomic replace: a concurrent reload sees the old file or the new one, never half."""
        directory = self.upstream.parent
        fd, tmp = tempfile.mkstemp(prefix=".upstream-", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            mode = self.upstream.stat().st_mode & 0o777 if self.upstream.exists() else 0o644
            os.chmod(tmp, mode)
            os.replace(tmp, self.upstream)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def switch(self, port: int) -> None:
        """Route to `port`: write, `nginx -t`, reload. On any failure the previous file is back in place."""
        previous_text = self.read_upstream()
        self.write_upstream(render_upstream(port, self._single_port(previous_text)))
        try:
            self.apply()
        except BaseException:
            self.write_upstream(previous_text)
            raise

    def restore(self, text: str) -> None:
        """Put a previous upstream back and reload (the undo of `switch`)."""
        self.write_upstream(text)
        self.apply()


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "(no output)"
