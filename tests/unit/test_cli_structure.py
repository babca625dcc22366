"""The `ernie-ops` command's shape: every command group is a module of ernie_ops/cli with `register(sub)`,
listed in `cli.GROUPS`; no command runs a subprocess itself and no feature package reaches back into the CLI."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import ernie_ops
from ernie_ops import cli

PACKAGE = Path(ernie_ops.__file__).parent
SHARED = {"args", "console"}  # the parser and the consoles every group uses


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_every_module_of_the_cli_package_is_a_registered_command_group():
    modules = {m.name for m in pkgutil.iter_modules(cli.__path__)} - SHARED
    assert {g.__name__.rsplit(".", 1)[1] for g in cli.GROUPS} == modules
    assert all(callable(g.register) for g in cli.GROUPS)


def test_no_command_runs_a_subprocess_and_nothing_outside_the_cli_imports_it():
    for path in (PACKAGE / "cli").glob("*.py"):
        assert "subprocess" not in imported(path), f"{path.name}: the work (and its subprocesses) belongs in a feature package"
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name != "cli" and path.name != "__main__.py":
            assert not any(n == "ernie_ops.cli" or n.startswith("ernie_ops.cli.") for n in imported(path)), path
