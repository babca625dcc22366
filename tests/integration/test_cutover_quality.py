"""The cutover's quality gate with real engines: `ernie-ops cutover` (the CLI, its own process, as an operator runs
it) with `cutover.eval` set to the shipped smoke set, behind the project's nginx, between the real instruct model
(tests/harness/real_model.py; the package's one engine of it, `real_served`) and the random tiny model served under
the SAME served name (so the probe gate passes: /health, /v1/models and a completion all answer):

- from the random model to the real one it passes and traffic moves (the real model passes every case, the random
  one none: the new is better than the old);
- back, to the random model, it is refused by the quality step in one sentence naming the failing cases; traffic
  never moves (the upstream file is unchanged, the gateway still answers from the real model) and the new instance is
  stopped.

Units are processes here (tests/harness/process_host.py, driven through tests/harness/cutover_cli.py): a "stop" is
the bookkeeping of that host; the test stops the tiny engine it launched itself. Two engines in all (2 shared cores).
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
TINY = {"model": {"served_name": real_model.SERVED_NAME}}


@dataclass
class Site:
    work: Path
    real: int  # the package's real-model engine
    tiny: int  # the random tiny model under the real model's served name, launched here
    tool: Path  # the operator's config: gateway, instances, cutover.eval
    marks: Path
    ng: nginx.Nginx
    engine: serve_proc.ServeProcess | None = None

    def cutover(self, port: int) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "tests.harness.cutover_cli", str(self.marks), "--config", str(self.tool), "cutover", str(port)]
        env = {**os.environ, "COLUMNS": "200"}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)

    def answers_from(self) -> str:
        return httpx.get(f"{self.ng.url}/health", timeout=5).headers.get("x-ernie-upstream", "")

    def stopped(self) -> set[int]:
        return set(json.loads(self.marks.read_text())) if self.marks.exists() else set()


@pytest.fixture(scope="module")
def site(tiny_model_dir: Path, real_served) -> Iterator[Site]:
    work = Path(tempfile.mkdtemp(prefix="eo-gate-", dir="/var/tmp"))
    work.chmod(0o755)
    tiny = free_port()
    ng = nginx.prepare(work / "nginx", free_port(), tiny).start()  # routed first: the random model
    s = Site(work, real_served.port, tiny, work / "ernie.yaml", work / "stopped.json", ng)
    try:
        write_config(
            s.tool, real_model.cached(), [tiny, s.real], work / "cache", gateway=ng.gateway_config(),
            cutover={"eval": {"file": str(SMOKE)}}, health={"smoke_timeout_seconds": 120.0}, **REAL,
        )  # fmt: skip
        launch = write_config(work / f"launch-{tiny}.yaml", tiny_model_dir, [tiny], work / "cache", **TINY)
        started = time.monotonic()
        s.engine = serve_proc.start(launch, tiny, work)
        s.engine.wait_ready()
        print(f"\nrandom tiny model (served as {real_model.SERVED_NAME}) READY on {tiny} in {time.monotonic() - started:.1f} s")
        yield s
    finally:
        ng.stop()
        if s.engine is not None:
            s.engine.stop()
        shutil.rmtree(work, ignore_errors=True)


def transcript(title: str, done: subprocess.CompletedProcess, seconds: float) -> str:
    text = f"$ ernie-ops cutover ... ({title}; exit {done.returncode}, {seconds:.1f} s)\n{done.stderr}{done.stdout}"
    print("\n" + text)
    return text


def test_a_cutover_to_the_real_model_passes_the_quality_gate_and_moves_traffic(site: Site):
    assert site.answers_from().endswith(f":{site.tiny}")
    started = time.monotonic()
    done = site.cutover(site.real)
    said = " ".join(transcript("from the random tiny model to the real model", done, time.monotonic() - started).split())

    assert done.returncode == 0, said
    assert "✓ quality" in said and f"{site.real} 5/5 (100%), {site.tiny} 0/5 (0%): within 0% of the old" in said, said
    assert f"cutover switched: traffic on {site.real}" in said, said
    assert site.answers_from().endswith(f":{site.real}")
    assert site.tiny in site.stopped()  # the old instance was drained and retired (its process runs on: the next test's)


def test_a_cutover_to_the_random_model_is_refused_by_the_quality_gate_and_traffic_never_moves(site: Site):
    if not site.answers_from().endswith(f":{site.real}"):
        pytest.fail("needs the cutover to the real model before it (run the module in order)")
    upstream_before = site.ng.upstream_file.read_text()

    started = time.monotonic()
    done = site.cutover(site.tiny)
    said = " ".join(transcript("to the random tiny model", done, time.monotonic() - started).split())

    assert done.returncode == 1, said
    assert "cutover aborted: quality: " in said and f"{site.tiny} passed " in said and "needs 100%" in said, said
    assert f"{site.real} passed 5 of 5 (100%)" in said, said  # the old instance, on the same set
    assert "failing capital-france (missing 'Paris')" in said, said
    assert f"the old instance {site.real} keeps serving" in said and "Traceback" not in said, said
    assert "✓ gate" in said and "✗ quality" in said and "✓ undo: stop new" in said and "switch" not in said, said
    # traffic never moved: nginx's upstream is the one before, the gateway answers from the old port
    assert site.ng.upstream_file.read_text() == upstream_before
    assert site.answers_from().endswith(f":{site.real}")
    assert site.tiny in site.stopped()  # the runbook's undo stopped the new "unit"
