"""Reading the YAML files of the project (ernie.yaml, the chat users file): safe types, no duplicate keys.

PyYAML keeps the last of two equal keys, so a second `model:` section silently replaced the
first. `load()` refuses that at any depth and reports every repeat at once, each with the key
path, its line and the line of the first one. It also returns the composed node tree's key
lines, so callers can point each of their own problems at a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ernie_ops.errors import MISSING, ConfigProblem

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Duplicate:
    """A key given twice in one mapping."""

    path: tuple  # key path of the repeated key, as in `key_lines`: ('instances', 0, 'port')
    line: int  # 1-based line of the repeat
    first_line: int  # 1-based line of the first occurrence
    section: bool  # the repeated value is a mapping (two halves of one section)

    @property
    def field(self) -> str:
        return dotted(self.path)

    @property
    def advice(self) -> str:
        what = "merge the two sections" if self.section else "keep only one of them"
        return f"duplicate key; first at line {self.first_line}; {what}"

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.advice}"


class DuplicateKeyError(yaml.YAMLError):
    """One or more keys are repeated; a YAMLError so a caller that only expects YAML errors still refuses the file."""

    def __init__(self, duplicates: list[Duplicate]):
        self.duplicates = duplicates
        super().__init__("; ".join(str(d) for d in duplicates))


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated within one mapping (at any depth), naming both lines.

    `load()` finds every repeat with its key path before constructing; this is the safety net for
    anyone constructing with the loader directly. Keys merged in by `<<` may be overridden, as YAML
    says: a mapping is checked before `flatten_mapping` adds the merged keys to it.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self._checked:
            self._checked.add(id(node))
            dupes = _repeats(self, node)
            if dupes:
                key_node, first = dupes[0]
                d = Duplicate((key_node.value,), key_node.start_mark.line + 1, first.start_mark.line + 1, False)
                raise DuplicateKeyError([d])
        super().flatten_mapping(node)


def _repeats(loader: yaml.SafeLoader, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    """(repeated key node, first key node) pairs of one mapping, comparing the constructed keys (`1` == `0x1`)."""
    seen: dict[Any, yaml.Node] = {}
    out = []
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: the constructor reports it
            continue
        if first is not key_node:
            out.append((key_node, first))
    return out


@dataclass(frozen=True)
class Document:
    data: Any  # what yaml.safe_load would return (None for an empty file)
    node: yaml.Node | None  # the composed tree (None for an empty file)
    lines: dict[tuple, int]  # key path -> 1-based line, see `key_lines`


def load(text: str) -> Document:
    """Parse `text`; yaml.YAMLError for bad syntax, DuplicateKeyError (every repeat) for a repeated key."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None, None, {})
        duplicates = []
        for path, mapping in _mappings(node):
            values = {id(k): v for k, v in mapping.value}
            for key, first in _repeats(loader, mapping):
                section = isinstance(values[id(key)], yaml.MappingNode)
                duplicates.append(Duplicate((*path, key.value), key.start_mark.line + 1, first.start_mark.line + 1, section))
        if duplicates:
            raise DuplicateKeyError(sorted(duplicates, key=lambda d: d.line))
        data = loader.construct_document(node)
    finally:
        loader.dispose()
    return Document(data, node, key_lines(node))


def _mappings(node: yaml.Node, path: tuple = (), seen: set[int] | None = None):
    """(key path, mapping node) of every mapping in the tree; aliases are visited once."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        yield path, node
        for key_node, value_node in node.value:
            yield from _mappings(value_node, (*path, key_node.value), seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _mappings(item, (*path, i), seen)


def key_lines(node: yaml.Node | None, path: tuple = (), _inside: frozenset[int] = frozenset()) -> dict[tuple, int]:
    """Map each key path (('vllm', 'dtype'), ('instances', 0, 'port')) to its 1-based line."""
    if node is None or id(node) in _inside:  # a recursive alias (`&a [*a]`) is indexed once
        return {}
    inside = _inside | {id(node)}
    index = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = key_lines(value_node, (*path, key_node.value), inside)
            sub[(*path, key_node.value)] = key_node.start_mark.line + 1
            index.update(sub)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            index.update(key_lines(item, (*path, i), inside))
    return index


def dotted(path: tuple) -> str:
    """('instances', 0, 'port') -> 'instances[0].port'."""
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")


def problems(exc: yaml.YAMLError, source: str) -> list[ConfigProblem]:
    """A `load` failure as the file's problems: each repeated key at its line, or where the YAML stops parsing."""
    if isinstance(exc, DuplicateKeyError):
        return [ConfigProblem(source, d.line, d.field, MISSING, d.advice) for d in exc.duplicates]
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark else None
    return [ConfigProblem(source, line, "(yaml)", MISSING, f"not valid YAML: {getattr(exc, 'problem', exc)}")]


TYPE_TAGS = {"int", "float", "str", "bool", "none", "list", "dict", "literal"}  # pydantic's union/validator tags


def data_path(loc: tuple) -> tuple:
    """Drop pydantic's union/validator tags from an error location, keeping field names and indexes."""
    out: list[Any] = []
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.isidentifier() and part not in TYPE_TAGS):
            out.append(part)
        else:
            break
    return tuple(out)


def lookup(data: Any, path: tuple) -> Any:
    """The value at `path` in loaded YAML data, or MISSING."""
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return data
