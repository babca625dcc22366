"""ernie_ops/files/yamlfile.py: the one YAML reader; a repeated key is refused at any depth, with both lines."""

from __future__ import annotations

import pytest
import yaml

from ernie_ops.files import yamlfile


def test_load_gives_data_and_key_lines():
    doc = yamlfile.load("a: 1\nb:\n  - c: 2\n")
    assert doc.data == {"a": 1, "b": [{"c": 2}]}
    assert doc.lines[("a",)] == 1 and doc.lines[("b", 0, "c")] == 3
    assert yamlfile.load("").data is None and yamlfile.load("# only a comment\n").lines == {}


def test_every_repeat_is_reported_with_path_and_both_lines():
    with pytest.raises(yamlfile.DuplicateKeyError) as info:
        yamlfile.load("a:\n  x: 1\nb: [{k: 1, k: 2}]\na:\n  y: 2\n")
    dupes = info.value.duplicates
    assert [(d.path, d.line, d.first_line, d.section) for d in dupes] == [(("b", 0, "k"), 3, 3, False), (("a",), 4, 1, True)]
    assert isinstance(info.value, yaml.YAMLError)  # a caller that only knows YAML errors still refuses the file


def test_keys_are_compared_as_yaml_reads_them():
    with pytest.raises(yamlfile.DuplicateKeyError):
        yamlfile.load("1: a\n0x1: b\n")  # both are the integer 1
    assert yamlfile.load("1: a\n'1': b\n").data == {1: "a", "1": "b"}  # an int and a str


def test_merge_keys_may_be_overridden_even_through_nested_merges():
    # flattening `mid` puts base's q beside its own q; that is a merge, not a repeat
    text = "base: &b {q: 1, r: 1}\nmid: &m\n  <<: *b\n  q: 2\ntop:\n  <<: *m\n  r: 3\n"
    assert yamlfile.load(text).data == yaml.safe_load(text)  # the same values as PyYAML's own reading
    assert yaml.load(text, Loader=yamlfile.UniqueKeyLoader) == yaml.safe_load(text)
    assert yaml.safe_load(text)["mid"] == {"q": 2, "r": 1}


def test_the_loader_alone_refuses_a_repeat():
    with pytest.raises(yamlfile.DuplicateKeyError, match="line 3: z: duplicate key; first at line 2"):
        yaml.load("a: 1\nz: 1\nz: 2\n", Loader=yamlfile.UniqueKeyLoader)


def test_a_recursive_alias_does_not_loop():
    doc = yamlfile.load("a: &x [1, *x]\n")
    assert doc.data["a"][1] is doc.data["a"]
