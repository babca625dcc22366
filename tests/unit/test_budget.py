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


class _Report:
    """What the plugin reads of a pytest report: its node id, duration, user properties, and xdist's worker."""

    def __init__(self, nodeid: str, duration: float, user_properties: list, worker: str | None = None):
        self.nodeid, self.duration, self.user_properties = nodeid, duration, user_properties
        if worker is not None:
            self.node = type("Node", (), {"gateway": type("Gateway", (), {"id": worker})()})()


def test_counts_ride_on_the_reports_and_add_up_where_they_are_read(monkeypatch):
    """A worker's count leaves with its next report; the process that reads the reports (xdist's controller)
    adds them per module and the test time per lane."""
    monkeypatch.setattr(budget, "_counts", type(budget._counts)(budget._counts.default_factory))
    monkeypatch.setattr(budget, "_lanes", type(budget._lanes)(float))
    monkeypatch.setattr(budget, "_seconds", type(budget._seconds)(float))
    monkeypatch.setattr(budget, "_pending", dict.fromkeys(budget.KINDS, 0))
    budget.count("engines", 2)
    budget.count("hosts")
    carried = dict(budget._pending)
    budget._pending.update(dict.fromkeys(budget.KINDS, 0))  # as the report hook does (else this test's report carries it)
    assert carried == {"engines": 2, "playbooks": 0, "hosts": 1, "browsers": 0}
    # as on the controller: the report came from a worker, with the properties the worker's makereport added
    budget.pytest_runtest_logreport(_Report("tests/e2e/test_a.py::t1", 30.0, [(budget.PROPERTY, carried)], "gw0"))
    budget.pytest_runtest_logreport(_Report("tests/e2e/test_a.py::t2", 5.0, [("other", 1)], "gw0"))
    budget.pytest_runtest_logreport(_Report("tests/unit/test_b.py::t", 1.0, [], "gw1"))
    assert budget.counts()["tests/e2e/test_a.py"] == {"engines": 2, "playbooks": 0, "hosts": 1, "browsers": 0}
    assert "tests/unit/test_b.py" not in budget.counts() or not any(budget.counts()["tests/unit/test_b.py"].values())
    assert budget.lanes() == {"gw0": 35.0, "gw1": 1.0}
    assert budget.seconds() == {"tests/e2e/test_a.py": 35.0, "tests/unit/test_b.py": 1.0}
