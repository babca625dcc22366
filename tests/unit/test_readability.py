"""benchmarks/readability.py, the house's measures (issue 35): on this tree it finds no import pointing up or
sideways a floor and no cycle between packages, and prints the table; on a copy with one import pointing up it
names the import and the cycle it closes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(tree: Path) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.readability", "--root", str(tree), "--no-timing"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_the_tree_has_no_import_pointing_up_and_no_cycle_between_packages():
    table = measure(ROOT)
    print("\n" + table)
    assert "imports pointing up or sideways     0\n" in table and "cycles between packages             0\n" in table, table


def test_an_import_pointing_up_is_named_with_the_cycle_it_closes(tmp_path):
    shutil.copytree(ROOT / "ernie_ops", tmp_path / "ernie_ops", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    low = tmp_path / "ernie_ops" / "stats" / "metrics.py"  # stats sits below traffic, which imports it
    low.write_text(low.read_text() + "\n\ndef _up():\n    from ernie_ops.traffic import gateway  # noqa: F401\n")
    table = measure(tmp_path)
    assert "imports pointing up or sideways     1\n    ernie_ops.stats.metrics -> ernie_ops.traffic.gateway\n" in table, table
    cycle = table.split("cycles between packages             1\n")[1].splitlines()[0]
    assert "stats" in cycle and "traffic" in cycle, table
