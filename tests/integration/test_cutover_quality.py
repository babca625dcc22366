"""The cutover's quality gate with real engines: the real instruct model (tests/harness/real_model.py) routed by the
project's nginx, then `ernie-ops cutover` (the CLI, its own process, as an operator runs it) with `cutover.eval` set
to the shipped smoke set:

- to an instance serving the random tiny model under the SAME served name (so the probe gate passes: /health,
  /v1/models and a completion all answer) it is refused by the quality step in one sentence naming the failing
  cases; traffic never moved (the upstream file is unchanged, the gateway still answers from the old port) and the
  new instance is stopped;
- to another instance serving the real model it passes and traffic moves.

Units are processes here (tests/harness/process_host.py, driven through tests/harness/cutover_cli.py): a "stop" is
the bookkeeping of that host, and the test then stops the process itself. One engine more than the routed one at a
time (2 shared cores): the tiny one is stopped before the second real one starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, write_config
from tests.harness import nginx, real_model, serve_proc

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "ernie_ops" / "data" / "eval" / "smoke.yaml"
# float32: on this CPU bf16 changed short greedy answers of the real model (tests/integration/test_real_model.py)
REAL = {"model": {"served_name": real_model.SERVED_NAME}, "vllm": {"dtype": "float32"}}


@dataclass
class Site:
    work: Path
    old: int
    tiny: int
    good: int
    tool: Path  # the operator's config: gateway, instances, cutover.eval
    marks: Path
    ng: nginx.Nginx
    tiny_model_dir: Path
    engines: dict[int, serve_proc.ServeProcess]

    def launch(self, port: int, model_dir: Path, sections: dict) -> serve_proc.ServeProcess:
        """`ernie-ops serve PORT` for one model (its own launch config: the model path is per config file)."""
        cfg = write_config(self.work / f"launch-{port}.yaml", model_dir, [port], self.work / "cache", **sections)
        sp = self.engines[port] = serve_proc.start(cfg, port, self.work)
        sp.wait_ready()
        return sp

    def cutover(self, port: int) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "tests.harness.cutover_cli", str(self.marks), "--config", str(self.tool), "cutover", str(port)]
        env = {**os.environ, "COLUMNS": "200"}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)

    def answers_from(self) -> str:
        return httpx.get(f"{self.ng.url}/health", timeout=5).headers.get("x-ernie-upstream", "")

    def stopped(self) -> set[int]:
        return set(json.loads(self.marks.read_text())) if self.marks.exists() else set()


@pytest.fixture(scope="module")
def site(tiny_model_dir: Path) -> Iterator[Site]:
    work = Path(tempfile.mkdtemp(prefix="eo-gate-", dir="/var/tmp"))
    work.chmod(0o755)
    old, tiny, good = free_port(), free_port(), free_port()
    ng = nginx.prepare(work / "nginx", free_port(), old).start()
    s = Site(work, old, tiny, good, work / "ernie.yaml", work / "stopped.json", ng, tiny_model_dir, {})
    try:
        write_config(
            s.tool, real_model.cached(), [old, tiny, good], work / "cache", gateway=ng.gateway_config(),
            cutover={"eval": {"file": str(SMOKE)}}, health={"smoke_timeout_seconds": 120.0}, **REAL,
        )  # fmt: skip
        started = time.monotonic()
        s.launch(old, real_model.cached(), REAL)
        print(f"\nreal model READY on {old} in {time.monotonic() - started:.1f} s")
        yield s
    finally:
        ng.stop()
        for sp in s.engines.values():
            sp.stop()
        shutil.rmtree(work, ignore_errors=True)


def transcript(title: str, done: subprocess.CompletedProcess, seconds: float) -> str:
    text = f"$ ernie-ops cutover ... ({title}; exit {done.returncode}, {seconds:.1f} s)\n{done.stderr}{done.stdout}"
    print("\n" + text)
    return text


def test_a_cutover_to_the_random_model_is_refused_by_the_quality_gate_and_traffic_never_moves(site: Site):
    started = time.monotonic()
    sp = site.launch(site.tiny, site.tiny_model_dir, {"model": {"served_name": real_model.SERVED_NAME}})
    print(f"random tiny model (served as {real_model.SERVED_NAME}) READY on {site.tiny} in {time.monotonic() - started:.1f} s")
    upstream_before = site.ng.upstream_file.read_text()

    started = time.monotonic()
    done = site.cutover(site.tiny)
    said = " ".join(transcript("to the random tiny model", done, time.monotonic() - started).split())

    assert done.returncode == 1, said
    assert "cutover aborted: quality: " in said and f"{site.tiny} passed " in said and "needs 100%" in said, said
    assert f"{site.old} passed 5 of 5 (100%)" in said, said  # the old instance, on the same set
    assert "failing capital-france (missing 'Paris')" in said, said
    assert f"the old instance {site.old} keeps serving" in said and "Traceback" not in said, said
    assert "✓ gate" in said and "✗ quality" in said and "✓ undo: stop new" in said and "switch" not in said, said
    # traffic never moved: nginx's upstream is the one before, the gateway answers from the old port
    assert site.ng.upstream_file.read_text() == upstream_before
    assert site.answers_from().endswith(f":{site.old}")
    assert site.tiny in site.stopped()  # the runbook's undo stopped the new "unit" ...
    sp.stop()  # ... and its process goes too, before the next engine starts (2 shared cores)
    del site.engines[site.tiny]


def test_a_cutover_to_the_real_model_passes_the_quality_gate_and_moves_traffic(site: Site):
    started = time.monotonic()
    site.launch(site.good, real_model.cached(), REAL)
    print(f"real model READY on {site.good} in {time.monotonic() - started:.1f} s")

    started = time.monotonic()
    done = site.cutover(site.good)
    said = " ".join(transcript("to the real model", done, time.monotonic() - started).split())

    assert done.returncode == 0, said
    assert "✓ quality" in said and f"{site.good} 5/5 (100%), {site.old} 5/5 (100%): within 0% of the old" in said, said
    assert f"cutover switched: traffic on {site.good}" in said, said
    assert site.answers_from().endswith(f":{site.good}")
    assert site.old in site.stopped()  # the old instance was drained and retired
