"""Launcher fault paths that real vLLM cannot produce on demand, injected with a STUB engine.

The real launcher runs as `python -m ernie_ops serve` with accelerator=gpu, so it starts
`<venv>/bin/vllm serve ...`; that `vllm` is tests/harness/stub_engine.py in a throw-away venv
view (bin/python and lib/ link to the test venv). Everything else is real.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from ernie_ops.serving.manifest import human_size
from tests.conftest import free_port, write_config
from tests.harness import serve_proc

STUB = Path(__file__).resolve().parents[1] / "harness" / "stub_engine.py"


@pytest.fixture
def stub_venv(short_tmp: Path) -> Path:
    """bin/python (the test venv's), bin/vllm (the stub), lib -> the test venv's packages."""
    venv = short_tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    os.symlink(Path(sys.prefix) / "lib", venv / "lib")
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    vllm = venv / "bin" / "vllm"
    vllm.write_text(f"#!{sys.executable}\n" + STUB.read_text())
    vllm.chmod(0o755)
    return venv


def start_stub(short_tmp: Path, venv: Path, model_dir: Path, mode: str, **vllm: object) -> serve_proc.ServeProcess:
    port = free_port()
    cfg = write_config(short_tmp / "ernie.yaml", model_dir, [port], short_tmp / "cache", vllm={"accelerator": "gpu", **vllm})
    return serve_proc.start(cfg, port, short_tmp, python=str(venv / "bin" / "python"), extra_env={"STUB_MODE": mode})


def stub_shm(sp: serve_proc.ServeProcess) -> Path:
    return Path(f"/dev/shm/psm_stub_{sp.engine().pid}")


def wait_for_log(sp: serve_proc.ServeProcess, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in sp.log:
        if time.monotonic() > deadline or sp.proc.poll() is not None:
            raise AssertionError(f"launcher log never showed {text!r}:\n{sp.log}")
        time.sleep(0.1)


def test_a_slow_health_answer_still_pings_the_watchdog(short_tmp, stub_venv, tiny_model_dir):
    """A busy engine is not a hung one: its /health answering in 4.5 s, longer than a ping interval (WatchdogSec 12 s,
    pings every 4 s, so the probe had 4 s before) but well within the watchdog, keeps the pings coming and is never
    reported as not answering (launcher.probe_timeout). Before, such an engine was killed (a fresh clone's CI run)."""
    port = free_port()
    cfg = write_config(short_tmp / "ernie.yaml", tiny_model_dir, [port], short_tmp / "cache", vllm={"accelerator": "gpu"})
    sp = serve_proc.start(cfg, port, short_tmp, watchdog_usec=12_000_000, python=str(stub_venv / "bin" / "python"),
                          extra_env={"STUB_MODE": "slow-health", "STUB_HEALTH_DELAY": "4.5"})  # fmt: skip
    try:
        ready_at = sp.wait_ready()
        time.sleep(16)
        pings = [round(t - ready_at, 1) for t in sp.notify.times("WATCHDOG") if t > ready_at]
        print(f"\npings after READY (s), /health taking 4.5 s each: {pings}")
        assert len(pings) >= 2 and "withholding watchdog pings" not in sp.log, (pings, sp.log[-2000:])
        assert sp.proc.poll() is None, sp.log[-2000:]
    finally:
        sp.stop()


def test_wrong_model_never_gets_ready(short_tmp, stub_venv, tiny_model_dir):
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "wrong-model")
    try:
        wait_for_log(sp, "wrong model")
        assert "some-other-model" in sp.log and "ernie-tiny" in sp.log
        time.sleep(1)
        assert sp.notify.first("READY") is None
        assert sp.stop(timeout=20) == 0
    finally:
        sp.stop()


def test_failing_completion_never_gets_ready(short_tmp, stub_venv, tiny_model_dir):
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "completion-500")
    try:
        wait_for_log(sp, "completion returned HTTP 500")
        time.sleep(1)
        assert sp.notify.first("READY") is None
        assert sp.notify.first("STATUS") is not None
    finally:
        sp.stop()


def test_gpu_command_line_uses_vllm_serve(short_tmp, stub_venv, tiny_model_dir):
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "ok", gpu_memory_utilization=0.4)
    try:
        sp.wait_ready(timeout=30)
        cmdline = sp.engine().cmdline()
        assert cmdline[1:4] == [str(stub_venv / "bin" / "vllm"), "serve", str(tiny_model_dir)], cmdline
        assert "--gpu-memory-utilization" in cmdline and "0.4" in cmdline
        assert cmdline[cmdline.index("--host") + 1] == "127.0.0.1"
    finally:
        sp.stop()


def test_sigterm_ignored_while_loading_is_killed_within_bound(short_tmp, stub_venv, tiny_model_dir):
    """Measured: vLLM ignored SIGTERM for > 90 s while loading. The launcher SIGKILLs the group after 5 s."""
    decoy = Path("/dev/shm/psm_ernie_ops_fault_decoy")
    decoy.write_bytes(b"x")
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "ignore-term")
    try:
        engine = sp.engine()
        shm = stub_shm(sp)
        deadline = time.monotonic() + 10
        while not shm.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # let the launcher record the segment (it scans once a second)
        t0 = time.monotonic()
        sp.terminate()
        code = sp.proc.wait(timeout=30)
        took = time.monotonic() - t0
        print(f"\nstub ignoring SIGTERM: launcher exit {code} after {took:.1f}s")
        assert code == 0
        assert 4.5 <= took < 8, f"took {took:.1f}s: the bound is the 5 s start-up grace"
        assert not serve_proc.alive(engine.pid)
        assert not shm.exists(), "the engine's shared memory was left behind"
        assert decoy.exists(), "shared memory of another process was removed"
        assert "SIGKILL of its process group" in sp.log
    finally:
        sp.stop()
        decoy.unlink(missing_ok=True)


def test_engine_exit_zero_after_ready_is_a_failure(short_tmp, stub_venv, tiny_model_dir):
    """vLLM's API server exits 0 after EngineDeadError: Restart=on-failure needs a non-zero exit."""
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "exit0-after-ready")
    try:
        sp.wait_ready(timeout=30)
        code = sp.proc.wait(timeout=30)
        assert code == 1
        assert "engine exited with code 0 while serving without being asked to stop" in sp.log
    finally:
        sp.stop()


def test_an_engine_whose_port_closes_before_it_exits_is_reported_as_died(short_tmp, stub_venv, tiny_model_dir):
    """A kill -9 closes the engine's socket a moment before its exit can be reaped; a probe in between used to
    log 'withholding watchdog pings' (seen in e2e). The stub makes that moment 0.3 s, probes run every 0.1 s."""
    port = free_port()
    cfg = write_config(short_tmp / "ernie.yaml", tiny_model_dir, [port], short_tmp / "cache", vllm={"accelerator": "gpu"})
    sp = serve_proc.start(cfg, port, short_tmp, watchdog_usec=300_000, python=str(stub_venv / "bin" / "python"),
                          extra_env={"STUB_MODE": "close-then-exit"})  # fmt: skip
    try:
        sp.wait_ready(timeout=30)
        assert sp.proc.wait(timeout=30) == 1
        assert "engine exited with code 1 while serving without being asked to stop" in sp.log, sp.log
        assert "withholding watchdog pings" not in sp.log, sp.log
    finally:
        sp.stop()


def test_missing_model_is_exit_2_before_anything_starts(short_tmp, stub_venv):
    sp = start_stub(short_tmp, stub_venv, short_tmp / "no-such-model", "ok")
    try:
        assert sp.proc.wait(timeout=30) == 2
        assert "has no config.json" in sp.log and "Traceback" not in sp.log
    finally:
        sp.stop()


def test_port_in_use_fails_fast_with_the_reason(short_tmp, stub_venv, tiny_model_dir):
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    cfg = write_config(short_tmp / "ernie.yaml", tiny_model_dir, [port], short_tmp / "cache", vllm={"accelerator": "gpu"})
    sp = serve_proc.start(cfg, port, short_tmp, python=str(stub_venv / "bin" / "python"))
    try:
        assert sp.proc.wait(timeout=30) == 1
        assert f"port {port} on 127.0.0.1 is taken" in sp.log
    finally:
        sp.stop()
        holder.close()


def test_watchdog_signal_kills_the_engine_at_once(short_tmp, stub_venv, tiny_model_dir):
    """systemd sends WatchdogSignal (SIGABRT) on a missed ping: no drain, group killed, non-zero exit."""
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "ok")
    try:
        sp.wait_ready(timeout=30)
        engine = sp.engine()
        time.sleep(1.2)
        shm = stub_shm(sp)
        t0 = time.monotonic()
        sp.terminate(signal.SIGABRT)
        code = sp.proc.wait(timeout=20)
        assert code == 1 and time.monotonic() - t0 < 3
        assert not serve_proc.alive(engine.pid)
        assert not shm.exists()
        assert sp.notify.first("STOPPING") is None  # not a stop: a failure
    finally:
        sp.stop()


def test_cores_that_do_not_exist_are_exit_2(short_tmp, tiny_model_dir):
    port = free_port()
    cfg = write_config(short_tmp / "ernie.yaml", tiny_model_dir, [port], short_tmp / "cache")
    text = cfg.read_text().replace(f"- port: {port}", f"- port: {port}\n  cpu_cores: '4000'")
    cfg.write_text(text)
    sp = serve_proc.start(cfg, port, short_tmp)
    try:
        assert sp.proc.wait(timeout=30) == 2
        assert "bound to cores [4000]" in sp.log and "Traceback" not in sp.log
    finally:
        sp.stop()


def test_watchdog_signal_during_a_drain_kills_at_once(short_tmp, stub_venv, tiny_model_dir):
    """A drain that never ends (engine deaf to SIGTERM) is cut short by systemd's WatchdogSignal."""
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "deaf-serving")
    try:
        sp.wait_ready(timeout=30)
        engine = sp.engine()
        sp.terminate(signal.SIGTERM)
        sp.terminate(signal.SIGTERM)  # a second TERM is ignored, the drain goes on
        time.sleep(1.0)
        assert sp.proc.poll() is None and engine.is_running()
        t0 = time.monotonic()
        sp.terminate(signal.SIGABRT)
        code = sp.proc.wait(timeout=20)
        assert time.monotonic() - t0 < 3, "SIGABRT did not cut the drain short"
        assert code == 0 and "SIGABRT during the stop" in sp.log, sp.log
        assert not serve_proc.alive(engine.pid)
    finally:
        sp.stop()


ROLE_MANIFEST = "set -o pipefail; find . -type f ! -name SHA256SUMS -printf '%P\\0' | sort -z | xargs -0 -r sha256sum > SHA256SUMS"
VLLM_CAPTURE = Path(__file__).resolve().parents[1] / "unit" / "data" / "vllm_truncated_weights.log"
CAPTURE_STDOUT_LINES = 121  # the capture is vLLM's stdout (121 lines) followed by its stderr


def provisioned_copy(src: Path, dest: Path) -> Path:
    """The tiny model as the Ansible model role leaves it: with SHA256SUMS (same pipeline as tasks/verify.yml)."""
    import subprocess

    shutil.copytree(src, dest)
    subprocess.run(["bash", "-c", ROLE_MANIFEST], cwd=dest, check=True)
    return dest


def test_half_copied_model_is_exit_2_before_the_engine_starts(short_tmp, stub_venv, tiny_model_dir):
    model = provisioned_copy(tiny_model_dir, short_tmp / "model")
    weights = model / "model.safetensors"
    full = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(full // 2)
    t0 = time.monotonic()
    sp = start_stub(short_tmp, stub_venv, model, "ok")
    try:
        assert sp.proc.wait(timeout=30) == 2
        took = time.monotonic() - t0
        print(f"\nhalf-copied model refused in {took:.1f}s")
        assert (
            f"exit 2: model at {model} is incomplete: model.safetensors is {human_size(full // 2)} of {human_size(full)} "
            "(its safetensors header); re-run the model role (ansible-playbook site.yml --tags model) or copy it again"
        ) in sp.log, sp.log
        assert "starting engine" not in sp.log and "Traceback" not in sp.log
    finally:
        sp.stop()


def test_model_matching_its_manifest_is_checked_and_served(short_tmp, stub_venv, tiny_model_dir):
    model = provisioned_copy(tiny_model_dir, short_tmp / "model")
    listed = len((model / "SHA256SUMS").read_text().splitlines())
    (model / "notes.txt").write_text("added after provisioning: not in SHA256SUMS, ignored")
    sp = start_stub(short_tmp, stub_venv, model, "ok")
    try:
        sp.wait_ready(timeout=30)
        assert f"[serve {sp.port}] {listed} file(s) match SHA256SUMS" in sp.log
    finally:
        sp.stop()


def test_engine_death_names_the_engines_own_error(short_tmp, stub_venv, tiny_model_dir):
    """STUB: `vllm` replays real vLLM output of a start on truncated weights (stdout, then stderr) and exits 1."""
    (stub_venv / "bin" / "vllm").write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"lines = open({str(VLLM_CAPTURE)!r}).read().splitlines(keepends=True)\n"
        f"sys.stdout.writelines(lines[:{CAPTURE_STDOUT_LINES}]); sys.stdout.flush()\n"
        f"sys.stderr.writelines(lines[{CAPTURE_STDOUT_LINES}:]); sys.stderr.flush()\n"
        "sys.exit(1)\n"
    )
    sp = start_stub(short_tmp, stub_venv, tiny_model_dir, "ok")
    try:
        assert sp.proc.wait(timeout=30) == 1
        assert (
            "exit 1: engine exited with code 1 while loading; its last error: SafetensorError: Error while deserializing header: "
            "incomplete metadata, file not fully covered"
        ) in sp.log, sp.log
        # the engine's own output still reaches the journal, whole and in order
        assert VLLM_CAPTURE.read_text() in sp.log
    finally:
        sp.stop()
