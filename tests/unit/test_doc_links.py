"""Every relative link in README.md, docs/ and the roles' READMEs points at a file that exists, and an `#anchor` at
a heading of it (GitHub's slugs): the README became a map of docs/ (issue 35), and a map with dead ends is worse than
none. Links inside code (fenced blocks, indented blocks, `spans`) are not links."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "ansible" / "roles").glob("*/README.md"))]


def without_code(text: str) -> str:
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    text = "\n".join(line for line in text.split("\n") if not re.match(r"^( {4}|\t)", line))
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    for line in re.sub(r"^(```|~~~).*?^\1", "", path.read_text(), flags=re.S | re.M).split("\n"):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            s = slug(m.group(1).replace("`", ""))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for m in LINK.finditer(without_code(path.read_text())):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            continue
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(root)}: ({target})"
        if not dest.exists():
            found.append(f"{where}: no such file")
        elif fragment and (dest.suffix != ".md" or fragment not in anchors(dest)):
            found.append(f"{where}: no heading with that anchor")
    return found


def test_every_relative_link_of_the_documentation_leads_somewhere():
    docs = documents()
    assert len(docs) > 10 and (ROOT / "docs" / "README.md") in docs
    problems = [p for d in docs for p in broken(d)]
    assert not problems, "\n".join(problems)


def test_a_dead_link_and_a_dead_anchor_are_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## The `pool`: replicas\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/a.md#the-pool-replicas) [gone](docs/b.md) [anchor](docs/a.md#nothing) [web](https://x.example) `[code](nope.md)`\n"
    )
    assert broken(readme, tmp_path) == [
        "README.md: (docs/b.md): no such file",
        "README.md: (docs/a.md#nothing): no heading with that anchor",
    ]


def test_every_design_note_a_module_points_at_exists_and_the_map_lists_each():
    """A docstring's long reasoning lives in docs/design/ (issue 35): each note a module names is there, and
    docs/README.md's map lists every note."""
    named = {
        (path.relative_to(ROOT), note)
        for path in (ROOT / "ernie_ops").rglob("*.py")
        for note in re.findall(r"docs/design/([\w.-]+\.md)", path.read_text())
    }
    assert named, "no module points at a design note: has docs/design moved?"
    missing = sorted(f"{path}: docs/design/{note}" for path, note in named if not (ROOT / "docs" / "design" / note).exists())
    assert not missing, missing
    listed = set(re.findall(r"\(design/([\w.-]+\.md)\)", (ROOT / "docs" / "README.md").read_text()))
    assert {p.name for p in (ROOT / "docs" / "design").glob("*.md")} == listed
