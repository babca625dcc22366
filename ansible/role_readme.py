"""The Variables table of each role's README.md, generated from its meta/argument_specs.yml.

The argument spec is what Ansible validates a role's inputs against, so documenting the variables from it (and not
by hand) keeps the READMEs from drifting; tests/unit/test_role_readmes.py fails when a README's block is stale.

    python ansible/role_readme.py           # rewrite the block between the markers of every role's README.md
    python ansible/role_readme.py --check   # change nothing; exit 1 naming the READMEs whose block is stale (CI)
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parent / "roles"
BEGIN = "<!-- BEGIN VARIABLES (generated from meta/argument_specs.yml: python ansible/role_readme.py) -->"
END = "<!-- END VARIABLES -->"
LEGEND = (
    "Validated by Ansible against `meta/argument_specs.yml` (entry point `main`) before the role's tasks run; the"
    " defaults themselves are set in `defaults/main.yml`. A default of — is not a fixed value: the description says how"
    " the role derives it, and a variable marked *(from ROLE)* is set by that role."
)


def _md(text: str) -> str:
    """Text safe in a table cell: `|` escaped everywhere, `<` and `*` outside code spans (`<hex>` is not an HTML tag)."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;").replace("*", r"\*") for p in parts).replace("|", r"\|")


def _compact(value: object) -> str:
    """A default as one line of flow-style YAML in a code span: `[]`, `{}`, `''`, `'12.1'`, `[127.0.0.1, '::1']`."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False).strip()
    return f"`{text.removesuffix('...').strip()}`"


def _rows(name: str, opt: dict) -> list[str]:
    kind = opt.get("type", "str")
    if kind == "list" and "elements" in opt:
        kind = f"list of {opt['elements']}"
    if "choices" in opt:
        kind += ": " + ", ".join(f"`{c}`" for c in opt["choices"])
    if opt.get("no_log"):
        kind += " (no_log)"
    default = "**required**" if opt.get("required") else _compact(opt["default"]) if "default" in opt else "—"
    description = opt.get("description", "")
    description = " ".join(description) if isinstance(description, list) else description
    cells = [f"`{name}`", _md(kind), default.replace("|", r"\|"), _md(description)]
    rows = ["| " + " | ".join(cells) + " |"]
    prefix = f"{name}[]." if opt.get("type") == "list" else f"{name}."
    for sub, sub_opt in (opt.get("options") or {}).items():
        rows += _rows(prefix + sub, sub_opt)
    return rows


def variables_table(spec: dict) -> str:
    """The Markdown table of a parsed meta/argument_specs.yml: one row per option of its `main` entry point, in the
    spec's order, a sub-option as `parent.key` (`parent[].key` in a list's items); ends with a newline."""
    options = spec["argument_specs"]["main"].get("options") or {}
    lines = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, opt in options.items():
        lines += _rows(name, opt)
    return "\n".join(lines) + "\n"


def generated_block(role: Path) -> str:
    """What belongs between the markers of `role`'s README.md now."""
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return f"\n{textwrap.fill(LEGEND, 120)}\n\n{variables_table(spec)}\n"


def current_block(text: str) -> str | None:
    """What is between the markers of a README's text, None without both markers."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start + len(BEGIN) : end] if 0 <= start < end else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a README's block is stale")
    args = parser.parse_args(argv)
    stale, broken = [], []
    for role in sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file()):
        readme = role / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        block, new = current_block(text), generated_block(role)
        if block is None:
            broken.append(readme)
        elif block != new:
            stale.append(readme)
            if not args.check:
                readme.write_text(text.replace(BEGIN + block + END, BEGIN + new + END, 1), encoding="utf-8")
    for readme in broken:
        print(f"{readme}: missing, or without the lines {BEGIN} and {END}", file=sys.stderr)
    for readme in stale:
        print(f"{readme}: {'stale: run python ansible/role_readme.py' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
