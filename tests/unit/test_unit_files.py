"""Static checks of the unit files in systemd/ (the ones Ansible installs and e2e tests run)."""

from __future__ import annotations

import configparser
import re
import subprocess

import pytest

from tests.harness.unit_files import SYSTEMD, directives, exposure

VLLM_UNIT = SYSTEMD / "ernie-vllm@.service"
MAX_EXPOSURE = 2.0


def test_vllm_unit_exposure_is_at_most_2():
    score = exposure(VLLM_UNIT)
    print(f"\nsystemd-analyze security --offline=true {VLLM_UNIT.name}: {score}")
    assert score <= MAX_EXPOSURE


def test_vllm_unit_keeps_what_vllm_needs_and_avoids_what_breaks_it():
    d = directives(VLLM_UNIT)
    assert d["Type"] == ["notify"] and d["KillMode"] == ["mixed"]
    assert "AF_NETLINK" in d["RestrictAddressFamilies"][0]  # gloo
    assert "MemoryDenyWriteExecute" not in d  # oneDNN JIT: EngineDeadError on the first completion
    assert "ProcSubset" not in d  # psutil reads /proc/meminfo
    assert not any("@resources" in v for v in d.get("SystemCallFilter", []))
    assert "PrivateDevices" not in d  # would hide the NVIDIA device nodes
    assert any("nvidia" in v for v in d["DeviceAllow"])
    assert d["ExecStart"] == ["/opt/ernie-ops/venv/bin/python -m ernie_ops serve %i"]
    assert d["RestartPreventExitStatus"] == ["2"]


def test_stop_timeout_exceeds_the_launchers_own_bound():
    """systemd's SIGKILL must come only after the launcher's drain + grace (defaults 30 s + 10 s)."""
    from ernie_ops import config

    defaults = config.Config().vllm
    stop = int(directives(VLLM_UNIT)["TimeoutStopSec"][0])
    assert stop > defaults.shutdown_drain_seconds + defaults.stop_grace_seconds + 5


def test_units_parse_as_ini_with_install_sections():
    for path in SYSTEMD.glob("*"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        parser.read_string(path.read_text())
        assert parser.has_section("Unit") and parser.has_section("Install"), path


@pytest.mark.parametrize("unit", sorted(p.name for p in SYSTEMD.glob("*")))
def test_verify_prints_nothing_but_the_missing_venv(unit, tmp_path):
    """Full verify runs inside the sandbox host (e2e), where /opt/ernie-ops/venv exists; here only that may be missing."""
    r = subprocess.run(["systemd-analyze", "verify", str(SYSTEMD / unit)], capture_output=True, text=True)
    missing_venv = re.compile(r"/opt/ernie-ops/(chat-)?venv/bin/python is not executable")
    lines = [line for line in (r.stdout + r.stderr).splitlines() if not missing_venv.search(line)]
    assert lines == [], lines


def test_pool_watch_unit_is_confined_to_the_gateways_includes_and_loopback():
    """Root (it rewrites the upstream include and signals nginx, as a cutover does), but nothing else: exposure at
    most 3 ("OK"), writes only the includes, the state directory (its lock), /run (nginx's pid file), what `nginx -t`
    opens for writing (its logs and temp directories: read-only, it fails) and the pool's Prometheus marks in the node
    exporter's directory (optional: `-`, a host without monitoring has none)."""
    unit = SYSTEMD / "ernie-pool-watch.service"
    score = exposure(unit)
    print(f"\nsystemd-analyze security --offline=true {unit.name}: {score}")
    assert score <= 3.0
    d = directives(unit)
    assert d["ProtectSystem"] == ["strict"]
    writable = "/etc/nginx/ernie-ops /var/lib/ernie-ops /run /var/log/nginx /var/lib/nginx -/var/lib/prometheus/node-exporter"
    assert d["ReadWritePaths"] == [writable]
    assert d["ExecStart"] == ["/opt/ernie-ops/venv/bin/python -m ernie_ops pool watch"] and d["Restart"] == ["always"]
