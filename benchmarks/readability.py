"""How readable the house is, in numbers (issue 35's measures): README lines; imports pointing up or sideways a floor
of .importlinter and cycles between packages; the longest modules and classes; the longest module docstrings; and
`ernie-ops --help`'s start time. The unit tier runs it on the tree (tests/unit/test_readability.py) and fails on an
import pointing up or a cycle, so they cannot come back; `lint-imports` names the offending import.

    python -m benchmarks.readability [--root TREE] [--no-timing]

--root measures another checkout of the project (an older commit's worktree, for a before/after table), judged by
this checkout's floors unless --floors names another .importlinter.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ernie_ops"


@dataclass
class Measures:
    readme_lines: int
    up_imports: list[tuple[str, str]]  # (importer, imported): the importer's floor is below or beside the imported's
    package_cycles: list[list[str]]  # packages that import each other, directly or round a loop
    modules: list[tuple[int, str]]  # (lines, module), longest first
    classes: list[tuple[int, int, str]]  # (lines, methods, module:Class), longest first
    docstrings: list[tuple[int, str]]  # (lines of the module docstring, module), longest first
    help_seconds: list[float] = field(default_factory=list)


def package_of(module: str) -> str:
    """ernie_ops.traffic.canary.watch -> traffic; ernie_ops.config -> config (a module on its own floor)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floors(path: Path) -> dict[str, tuple[int, int]]:
    """package -> (floor, sibling) from an .importlinter's layers, floor 0 at the top."""
    parser = configparser.ConfigParser()
    parser.read(path)
    lines = [line.strip() for line in parser["importlinter:contract:floors"]["layers"].splitlines() if line.strip()]
    return {name.strip(): (i, j) for i, line in enumerate(lines) for j, name in enumerate(line.split("|"))}


def import_graph(root: Path) -> grimp.ImportGraph:
    sys.path.insert(0, str(root))  # this tree's package, not an installed one
    try:
        return grimp.build_graph(PACKAGE, cache_dir=None)
    finally:
        sys.path.remove(str(root))


def module_imports(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """(importer, imported) for every direct import between two modules of the package, sorted."""
    return sorted((a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a))


def up_imports(imports: list[tuple[str, str]], floor_of: dict[str, tuple[int, int]]) -> list[tuple[str, str]]:
    found = []
    for importer, imported in imports:
        a, b = floor_of.get(package_of(importer)), floor_of.get(package_of(imported))
        if a and b and package_of(importer) != package_of(imported) and a[0] >= b[0]:
            found.append((importer, imported))
    return found


def package_cycles(imports: list[tuple[str, str]]) -> list[list[str]]:
    packages = nx.DiGraph((package_of(a), package_of(b)) for a, b in imports if package_of(a) != package_of(b))
    return sorted(sorted(c) for c in nx.strongly_connected_components(packages) if len(c) > 1)


def sources(root: Path) -> dict[str, ast.Module]:
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), str(path))
    return out


def help_seconds(root: Path, runs: int = 5) -> list[float]:
    """`python -m ernie_ops --help` (what the console script runs), wall seconds per run, the first one dropped."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", PACKAGE, "--help"], env=env, cwd=root, capture_output=True, check=True, timeout=60)
        times.append(time.perf_counter() - start)
    return times[1:]


def measure(root: Path, floors_file: Path = ROOT / ".importlinter", timing: bool = True) -> Measures:
    imports = module_imports(import_graph(root))
    trees = sources(root)
    modules, classes, docstrings = [], [], []
    for name, tree in trees.items():
        modules.append((tree.body[-1].end_lineno if tree.body else 0, name))
        doc = ast.get_docstring(tree, clean=False)
        docstrings.append((len(doc.splitlines()) if doc else 0, name))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
                classes.append((node.end_lineno - node.lineno + 1, methods, f"{name}:{node.name}"))
    return Measures(
        readme_lines=len((root / "README.md").read_text().splitlines()),
        up_imports=up_imports(imports, floors(floors_file)),
        package_cycles=package_cycles(imports),
        modules=sorted(modules, reverse=True),
        classes=sorted(classes, reverse=True),
        docstrings=sorted(docstrings, reverse=True),
        help_seconds=help_seconds(root) if timing else [],
    )


def report(m: Measures, top: int = 5) -> str:
    docs = [n for n, _ in m.docstrings]
    lines = [
        f"README.md lines                     {m.readme_lines}",
        f"imports pointing up or sideways     {len(m.up_imports)}" + "".join(f"\n    {a} -> {b}" for a, b in m.up_imports),
        f"cycles between packages             {len(m.package_cycles)}" + "".join(f"\n    {' <-> '.join(c)}" for c in m.package_cycles),
        f"modules                             {len(m.modules)}, median {statistics.median(n for n, _ in m.modules):.0f} lines",
        "longest modules (lines)             " + ", ".join(f"{name} {n}" for n, name in m.modules[:top]),
        "longest classes (lines, methods)    " + ", ".join(f"{name} {n}/{k}" for n, k, name in m.classes[:top]),
        f"module docstrings                   median {statistics.median(docs):.0f} lines, {sum(n > 15 for n in docs)} over 15",
        "longest module docstrings (lines)   " + ", ".join(f"{name} {n}" for n, name in m.docstrings[:top]),
    ]
    if m.help_seconds:
        lines.append(
            f"ernie-ops --help start              median {statistics.median(m.help_seconds):.3f} s, "
            f"min {min(m.help_seconds):.3f} s ({len(m.help_seconds)} runs)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout of the project (default: this one)")
    parser.add_argument("--floors", type=Path, default=ROOT / ".importlinter", help="the floors to judge by (default: this checkout's)")
    parser.add_argument("--no-timing", action="store_true", help="skip the --help start time")
    args = parser.parse_args()
    print(report(measure(args.root.resolve(), args.floors, timing=not args.no_timing)))


if __name__ == "__main__":
    main()
