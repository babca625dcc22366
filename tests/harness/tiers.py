"""A tier that cannot run here skips on a developer's machine and FAILS under CI: a green CI ran every tier.

`.ci/run` exports ERNIE_OPS_REQUIRE_ALL_TIERS=1. A test module whose tier needs something this machine
lacks (the systemd sandbox, the browser) marks itself with the one helper:

    reason = sandbox.why_unavailable()
    if reason:
        pytestmark = tiers.unavailable(f"e2e: {reason}")

Without the flag that is a plain skip. With it, every test of the module fails at setup with the
reason (before any fixture boots anything), and this plugin (loaded by tests/conftest.py) fails the
session when a tier (unit, integration, e2e, ui: the markers tests/conftest.py sets from the folder)
had no passed test or when any test was skipped, naming them.
"""

from __future__ import annotations

import os

import pytest

FLAG = "ERNIE_OPS_REQUIRE_ALL_TIERS"
TIERS = ("unit", "integration", "e2e", "ui")
MARK = "tier_unavailable"
_PASSED = pytest.StashKey[set]()
_SKIPPED = pytest.StashKey[list]()
_PROBLEMS = pytest.StashKey[list]()
_CONFIG: list[pytest.Config | None] = [None]  # the session's config, for the report hook (it is given none)


def required() -> bool:
    """True under CI (`.ci/run`): every tier must run."""
    return os.environ.get(FLAG, "").strip() not in ("", "0")


def unavailable(reason: str) -> pytest.MarkDecorator:
    """The `pytestmark` of a module whose tier cannot run here: a skip locally, a failure under the flag."""
    if required():
        return getattr(pytest.mark, MARK)(reason=reason)
    return pytest.mark.skip(reason=reason)


def missing_tiers(passed: set[str]) -> list[str]:
    """The tiers (in order) with no passed test."""
    return [t for t in TIERS if t not in passed]


def problems(passed: set[str], skipped: list[str]) -> list[str]:
    """One sentence per reason the session must fail under the flag; empty when every tier ran."""
    out = []
    missing = missing_tiers(passed)
    if missing:
        out.append(f"no test of tier(s) {', '.join(missing)} ran and passed; CI must run every tier (tests/{{unit,integration,e2e,ui}})")
    if skipped:
        out.append(f"{len(skipped)} test(s) skipped, which CI does not allow: " + "; ".join(skipped))
    return out


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(reason): the tier cannot run here; fails the test under {FLAG}=1")
    _CONFIG[0] = config
    config.stash[_PASSED] = set()
    config.stash[_SKIPPED] = []
    config.stash[_PROBLEMS] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    mark = item.get_closest_marker(MARK)
    if mark is not None:
        pytest.fail(f"{mark.kwargs['reason']} ({FLAG}=1: under CI every tier must run; install what is missing)", pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counted where the reports are read: the only process, or xdist's controller (a worker's reports reach it
    with their keywords, the tier markers among them)."""
    config = _CONFIG[0]
    if config is None or _PASSED not in config.stash:
        return
    if report.when == "call" and report.passed:
        config.stash[_PASSED].update(t for t in TIERS if t in report.keywords)
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
        config.stash[_SKIPPED].append(f"{report.nodeid} ({reason})")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not required() or config.option.collectonly or _PASSED not in config.stash or hasattr(config, "workerinput"):
        return  # an xdist worker saw only its lane's tests: the controller judges the session
    found = config.stash[_PROBLEMS] = problems(config.stash[_PASSED], config.stash[_SKIPPED])
    if found and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)  # after the timings, just above the short summary
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    found = config.stash.get(_PROBLEMS, [])
    if not found:
        return
    terminalreporter.write_sep("=", f"{FLAG}=1 (CI): the session FAILS", red=True)
    for line in found:
        terminalreporter.write_line(line, red=True)
