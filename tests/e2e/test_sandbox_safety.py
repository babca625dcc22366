"""The sandbox must never touch the host: its /tmp, /etc, cgroup mounts (a careless boot once emptied /tmp)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness import sandbox, tiers

PROJECT = Path(__file__).resolve().parents[2]

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e: {reason}")


def _mounts() -> str:
    return Path("/proc/self/mounts").read_text()


def test_boot_and_teardown_leave_the_host_untouched():
    marker = Path(f"/tmp/ernie-ops-host-marker-{os.getpid()}")
    marker.write_text("host")
    mounts_before = _mounts()
    hostname = Path("/etc/hostname").read_text() if Path("/etc/hostname").exists() else None
    sb = sandbox.up("safety", PROJECT, PROJECT / "systemd", net=True)
    base = sb.base
    try:
        assert sb.systemctl("is-system-running", check=False).stdout.strip() in ("running", "degraded")
        inside_tmp = sb.run("ls -A /tmp").stdout.split()
        assert marker.name not in inside_tmp, "the sandbox sees the host's /tmp"
        sb.run("echo sandbox > /tmp/inside && echo x > /etc/ernie-sandbox-write")
        sb.run("useradd --system sandboxuser")
        units = sb.run("ls /run/systemd/system").stdout.split()
        assert "ernie-vllm@.service" in units and "sandbox.target" in units
    finally:
        sb.down()
    assert marker.read_text() == "host", "host /tmp marker lost"
    assert not Path("/tmp/inside").exists() and not Path("/etc/ernie-sandbox-write").exists()
    assert "sandboxuser" not in Path("/etc/passwd").read_text()
    if hostname is not None:
        assert Path("/etc/hostname").read_text() == hostname
    assert _mounts() == mounts_before, "mounts changed on the host"
    for line in _mounts().splitlines():
        if " cgroup" in line:
            assert " rw," in line, f"host cgroup mount became read-only: {line}"
    assert not base.exists()
    marker.unlink()
