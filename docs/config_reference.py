"""Write docs/configuration-reference.md from the config's schema (ernie_ops/config.py and every section it composes),
so the reference cannot drift from the code: `--check` exits 1 when the file differs from what the schema gives
(tests/unit/test_config_reference.py runs it).

    python docs/config_reference.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration-reference.md"
HEAD = """# Configuration reference

Back to [Configuration](configuration.md); every document: [the index](README.md).

Generated from the schema by `python docs/config_reference.py` (a unit test fails when this file and the code
differ): every key of `/etc/ernie-ops/ernie.yaml`, its type, its default and what it is for. The example with
comments: [`ernie_ops/data/ernie.example.yaml`](../ernie_ops/data/ernie.example.yaml).
"""


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The section model a field holds (itself, or the item of a list, or the value of an optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (model := _model_of(arg)) is not None:
            return model
    return None


def _container(annotation: object) -> str:
    """How a key path goes on into a list's items ("[]") or a mapping's values (".<name>")."""
    for a in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(a) is list:
            return "[]"
        if typing.get_origin(a) is dict:
            return ".<name>"
    return ""


def _type(annotation: object) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = str(annotation).replace("typing.", "")
    for prefix in ("ernie_ops.chat.config.", "ernie_ops.config.", "ernie_ops.docs.config.", "ernie_ops.marketing.config.",
                   "ernie_ops.onboarding.config.", "ernie_ops.hr.config.", "ernie_ops.threads.config."):  # fmt: skip
        text = text.replace(prefix, "")
    return text


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return "(list)"
    return json.dumps(value, ensure_ascii=False, default=str)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def sections(model: type[BaseModel], path: str, seen: set) -> list[str]:
    """The table of `model`'s keys under `path`, then its sub-sections' tables."""
    out = [f"## `{path}`" if path else "## top level", ""]
    doc = (model.__doc__ or "").strip()
    if doc and model.__module__.startswith("ernie_ops"):
        out += [" ".join(doc.split()), ""]
    out += ["| key | type | default | what |", "|---|---|---|---|"]
    subs = []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        sub = _model_of(field.annotation)
        what = field.description or ""
        if sub is not None and sub.__module__.startswith("ernie_ops"):
            if sub not in seen:
                subs.append((sub, key + _container(field.annotation)))
            what = what or f"see `{key}` below"
        out.append(f"| `{key}` | {_cell(_type(field.annotation))} | {_cell(_default(field))} | {_cell(what)} |")
    out.append("")
    for sub, key in subs:
        seen.add(sub)
        out += sections(sub, key, seen)
    return out


def render() -> str:
    from ernie_ops.config import Config

    return HEAD + "\n" + "\n".join(sections(Config, "", set())).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the file differs from the schema")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} differs from the schema: run `python docs/config_reference.py`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
