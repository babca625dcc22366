"""A tier that cannot run skips locally and fails under CI (tests/harness/tiers.py): real pytest sessions
in a subprocess on tiny test files, with and without ERNIE_OPS_REQUIRE_ALL_TIERS; and `.ci/run` sets it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness import tiers

PROJECT = Path(__file__).resolve().parents[2]

# a module of a tier that cannot run here; its module fixture stands for booting a sandbox
GONE = """
from pathlib import Path

import pytest

from tests.harness import tiers

pytestmark = tiers.unavailable("ui: the frobnicator is missing")


@pytest.fixture(scope="module")
def booted():
    Path("booted").write_text("")


def test_needs_it(booted):
    pass
"""


def every_tier(*tiers_: str) -> str:
    return "import pytest\n" + "".join(f"\n\n@pytest.mark.{t}\ndef test_{t}():\n    pass\n" for t in tiers_)


def run_pytest(tmp_path: Path, flag: bool, lanes: bool = False, **files: str) -> subprocess.CompletedProcess:
    """pytest with only the tiers plugin, on `files` (name -> text) in a fresh rootdir; `lanes`: two xdist workers,
    as `make test` runs."""
    markers = "".join(f"    {t}: tier\n" for t in tiers.TIERS)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = --strict-markers\nmarkers =\n{markers}")
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in (tiers.FLAG, "PYTEST_ADDOPTS")}  # CI sets the flag for us too
    env["PYTHONPATH"] = str(PROJECT)
    if flag:
        env[tiers.FLAG] = "1"
    argv = [sys.executable, "-m", "pytest", "-p", "tests.harness.tiers", "-p", "no:cacheprovider", "-rA", str(tmp_path)]
    argv += ["-n", "2", "--dist", "loadfile"] if lanes else []
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    proc.stdout += proc.stderr
    return proc


def test_unavailable_tier_skips_locally(tmp_path):
    proc = run_pytest(tmp_path, flag=False, test_gone=GONE, test_all=every_tier(*tiers.TIERS))
    assert proc.returncode == 0, proc.stdout
    assert "4 passed, 1 skipped" in proc.stdout and "ui: the frobnicator is missing" in proc.stdout
    assert not (tmp_path / "booted").exists()


def test_unavailable_tier_fails_under_the_flag_before_its_fixtures(tmp_path):
    proc = run_pytest(tmp_path, flag=True, test_gone=GONE, test_all=every_tier(*tiers.TIERS))
    assert proc.returncode == 1, proc.stdout
    assert "4 passed, 1 error" in proc.stdout  # a failure at setup is an error: no fixture of the module ran
    assert f"ui: the frobnicator is missing ({tiers.FLAG}=1" in proc.stdout
    assert not (tmp_path / "booted").exists()


def test_every_tier_passed_is_green_under_the_flag(tmp_path):
    proc = run_pytest(tmp_path, flag=True, test_all=every_tier(*tiers.TIERS))
    assert proc.returncode == 0, proc.stdout
    assert "4 passed" in proc.stdout and "FAILS" not in proc.stdout


def test_a_tier_without_a_passed_test_fails_the_session_under_the_flag(tmp_path):
    failing_e2e = "import pytest\n\n\n@pytest.mark.e2e\ndef test_e2e():\n    assert False\n"
    files = {"test_some": every_tier("unit", "integration"), "test_bad_e2e": failing_e2e}
    assert run_pytest(tmp_path, flag=False, test_some=files["test_some"]).returncode == 0
    proc = run_pytest(tmp_path, flag=True, test_some=files["test_some"])
    assert proc.returncode == 1, proc.stdout
    assert "2 passed" in proc.stdout and "no test of tier(s) e2e, ui ran and passed" in proc.stdout
    proc = run_pytest(tmp_path, flag=True, **files)  # a failed e2e test is not an e2e test that ran and passed
    assert proc.returncode == 1 and "no test of tier(s) e2e, ui ran and passed" in proc.stdout, proc.stdout


def test_any_skip_fails_the_session_under_the_flag(tmp_path):
    skipping = "import pytest\n\n\n@pytest.mark.unit\ndef test_later():\n    pytest.skip('not today')\n"
    assert run_pytest(tmp_path, flag=False, test_all=every_tier(*tiers.TIERS), test_skip=skipping).returncode == 0
    proc = run_pytest(tmp_path, flag=True, test_all=every_tier(*tiers.TIERS), test_skip=skipping)
    assert proc.returncode == 1, proc.stdout
    assert "4 passed, 1 skipped" in proc.stdout
    assert "1 test(s) skipped, which CI does not allow: test_skip.py::test_later (Skipped: not today)" in proc.stdout


def test_problems():
    assert tiers.problems(set(tiers.TIERS), []) == []
    assert tiers.missing_tiers({"unit", "ui"}) == ["integration", "e2e"]
    (only,) = tiers.problems({"unit", "ui"}, [])
    assert only.startswith("no test of tier(s) integration, e2e ran and passed; CI must run every tier")
    assert tiers.problems(set(tiers.TIERS), ["a (b)"]) == ["1 test(s) skipped, which CI does not allow: a (b)"]


def test_ci_run_requires_every_tier_and_runs_make_test(tmp_path):
    """`make` is a stub printing what it got: the real one would run the whole suite from inside this test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(f'#!/bin/sh\necho "make $* {tiers.FLAG}=${tiers.FLAG} in $(pwd)"\n')
    (bin_dir / "make").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != tiers.FLAG}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    proc = subprocess.run(["bash", str(PROJECT / ".ci" / "run")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"make test {tiers.FLAG}=1 in {PROJECT}\n"


def test_the_verdict_is_the_whole_sessions_when_two_lanes_share_the_tiers(tmp_path):
    """Under xdist each worker sees some tiers only: the controller, which reads every report, judges."""
    split = {"test_one": every_tier("unit", "integration"), "test_two": every_tier("e2e", "ui")}
    runs = {name: tmp_path / name for name in ("all", "half", "skip")}
    for d in runs.values():
        d.mkdir()
    proc = run_pytest(runs["all"], flag=True, lanes=True, **split)
    assert proc.returncode == 0 and "4 passed" in proc.stdout and "FAILS" not in proc.stdout, proc.stdout
    proc = run_pytest(runs["half"], flag=True, lanes=True, test_one=split["test_one"])
    assert proc.returncode == 1 and "no test of tier(s) e2e, ui ran and passed" in proc.stdout, proc.stdout
    skipping = "import pytest\n\n\n@pytest.mark.unit\ndef test_later():\n    pytest.skip('not today')\n"
    proc = run_pytest(runs["skip"], flag=True, lanes=True, test_skip=skipping, **split)
    assert proc.returncode == 1, proc.stdout
    assert "1 test(s) skipped, which CI does not allow: test_skip.py::test_later (Skipped: not today)" in proc.stdout
