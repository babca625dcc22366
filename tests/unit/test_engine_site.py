"""The engine's sitecustomize (ernie_ops/serving/engine_site/), run for real in child interpreters, and what the
launcher makes of its lines (enginelog.killed / cause / death_sentence)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ernie_ops.serving import engine, enginelog
from tests.conftest import write_config

# A parent that starts children the ways vLLM may (spawn, fork), kills them with real signals and reaps them.
PARENT = textwrap.dedent(
    """
    import multiprocessing as mp, os, signal, sys, time

    def sleep():
        time.sleep(60)

    if __name__ == "__main__":
        for method, name, sig in (("spawn", "VllmWorker-0", signal.SIGILL), ("fork", "EngineCore", signal.SIGKILL)):
            child = mp.get_context(method).Process(target=sleep, name=name)
            child.start()
            time.sleep(1.0)
            os.kill(child.pid, sig)
            child.join()
            print(f"{name} {child.pid} {child.exitcode}", file=sys.stderr, flush=True)
        ok = mp.get_context("spawn").Process(target=int, name="Fine")
        ok.start(); ok.join()
    """
)


def _run(tmp_path: Path, extra_path: str = "", text: str = PARENT) -> subprocess.CompletedProcess:
    script = tmp_path / "parent.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(engine.ENGINE_SITE), extra_path) if p)
    env["PYTHONFAULTHANDLER"] = "1"
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_every_process_says_what_it_did_about_amx_and_parents_name_killed_children(tmp_path):
    run = _run(tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    ends = {
        line.split()[0]: (int(line.split()[1]), int(line.split()[2])) for line in lines if line.startswith(("VllmWorker", "EngineCore"))
    }
    assert ends["VllmWorker-0"][1] == -4 and ends["EngineCore"][1] == -9, run.stderr
    amx = [line for line in lines if ": AMX: " in line]
    # the parent, the spawned worker, the Fine child and multiprocessing's resource tracker: each its own line
    assert len({line.split()[3] for line in amx}) >= 3, amx
    expected = "tile data permitted" if "amx_tile" in Path("/proc/cpuinfo").read_text() else "offers no AMX"
    assert all(expected in line for line in amx), amx
    assert any("forked: AMX permission inherited" in line for line in lines), run.stderr
    assert "Fatal Python error: Illegal instruction" in run.stderr  # faulthandler in the worker

    killed = enginelog.killed(lines)
    assert killed == [
        enginelog.Killed("worker process", "VllmWorker-0", ends["VllmWorker-0"][0], "SIGILL"),
        enginelog.Killed("engine core process", "EngineCore", ends["EngineCore"][0], "SIGKILL"),
    ]  # in the order the parent saw them; the child that exited 0 is not reported


def test_the_sitecustomize_it_hides_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys; print('the other sitecustomize ran', file=sys.stderr)\n")
    run = _run(tmp_path, str(other), "print('main')\n")
    assert run.returncode == 0 and "main" in run.stdout, run.stderr
    assert run.stderr.index(": AMX: ") < run.stderr.index("the other sitecustomize ran"), run.stderr


def test_build_command_puts_the_engine_site_first(tmp_path):
    cfg_path = write_config(tmp_path / "ernie.yaml", tmp_path, [8000], tmp_path / "cache")
    from ernie_ops import config

    cfg = config.load(cfg_path)
    env = engine.build_command(cfg, 8000, env={"PYTHONPATH": "/opt/mine"}).env
    assert env["PYTHONPATH"] == f"{engine.ENGINE_SITE}{os.pathsep}/opt/mine"
    assert env["PYTHONFAULTHANDLER"] == "1"
    assert (engine.ENGINE_SITE / "sitecustomize.py").is_file()
    assert engine.build_command(cfg, 8000, env={}).env["PYTHONPATH"] == str(engine.ENGINE_SITE)


def test_the_first_reported_death_is_the_cause_else_the_api_servers_own():
    worker = enginelog.Killed("worker process", "VllmWorker-0", 12, "SIGILL")
    assert enginelog.cause([worker], 10, 0) is worker
    assert enginelog.cause([worker], 10, -9) is worker  # killed after its worker: the worker's death is the cause
    assert enginelog.cause([], 10, -9) == enginelog.Killed("API server process", "", 10, "SIGKILL")
    assert enginelog.cause([], 10, 0) is None and enginelog.cause([], 10, 1) is None


def test_death_sentences_say_what_the_signal_means():
    memory = "vllm.cpu_kvcache_space_gib (4 GiB), vllm.max_num_seqs (256) or vllm.max_model_len (8192)"
    ill = enginelog.death_sentence(enginelog.Killed("worker process", "VllmWorker-0", 12, "SIGILL"), memory)
    assert ill.startswith("the engine's worker process VllmWorker-0 (pid 12) was killed by SIGILL: the CPU refused an instruction")
    assert "AMX" in ill
    kill = enginelog.death_sentence(enginelog.Killed("API server process", "", 10, "SIGKILL"), memory)
    assert kill.startswith("the engine's API server process (pid 10) was killed by SIGKILL: ")
    assert "out-of-memory killer" in kill and memory in kill
    assert (
        enginelog.death_sentence(enginelog.Killed("process", "x", 3, "SIGUSR1"), memory)
        == "the engine's process x (pid 3) was killed by SIGUSR1"
    )
    assert enginelog.role_of("EngineCore_DP0") == "engine core process" and enginelog.role_of("VllmWorker-1") == "worker process"
    assert enginelog.role_of("resource_tracker") == "process"
