"""The suite's budget table (tests/harness/budget.py): rows per module, sums per tier and in all."""

from __future__ import annotations

import pytest

from tests.harness import budget


def test_the_table_sums_each_column_per_tier_and_in_all():
    seconds = {"tests/e2e/test_a.py": 100.0, "tests/e2e/test_b.py": 50.0, "tests/unit/test_c.py": 1.5}
    counts = {"tests/e2e/test_a.py": {"engines": 2, "playbooks": 3, "hosts": 1, "browsers": 1},
              "tests/e2e/test_b.py": {"engines": 1, "playbooks": 0, "hosts": 1, "browsers": 0}}  # fmt: skip
    lines = budget.table(seconds, counts)
    assert lines[0].split() == ["seconds", "engines", "playbooks", "hosts", "browsers", "module"]
    assert [line.split()[-1] for line in lines[1:4]] == ["tests/e2e/test_a.py", "tests/e2e/test_b.py", "tests/unit/test_c.py"]
    assert lines[1].split()[:5] == ["100.0", "2", "3", "1", "1"]
    assert lines[3].split()[:5] == ["1.5", "0", "0", "0", "0"]  # a module that started nothing
    assert lines[5].split() == ["150.0", "3", "3", "2", "1", "tier", "e2e"]
    assert lines[6].split() == ["1.5", "0", "0", "0", "0", "tier", "unit"]
    assert lines[-1].split() == ["151.5", "3", "3", "2", "1", "total"]


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown kind 'gpus'; one of engines, playbooks, hosts, browsers"):
        budget.count("gpus")
