"""Every import of ernie_ops/ points down a floor (.importlinter, checked by import-linter's `lint-imports`): the
tree as it is keeps the contract, and the same tree with one import pointing up breaks it, naming the import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_tree_keeps_its_floors():
    run = lint(ROOT)
    assert run.returncode == 0 and "Contracts: 1 kept, 0 broken." in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_an_import_pointing_up_breaks_the_contract_and_is_named(tmp_path):
    shutil.copytree(ROOT / "ernie_ops", tmp_path / "ernie_ops", ignore=shutil.ignore_patterns("__pycache__"))
    low = tmp_path / "ernie_ops" / "host" / "ports.py"  # host sits below traffic
    low.write_text(low.read_text() + "\n\ndef _up():\n    from ernie_ops.traffic import gateway  # noqa: F401\n")
    run = lint(tmp_path)
    assert run.returncode != 0 and "Contracts: 0 kept, 1 broken." in run.stdout, run.stdout[-3000:]
    assert "ernie_ops.host.ports -> ernie_ops.traffic.gateway" in run.stdout, run.stdout[-3000:]
