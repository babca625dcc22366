"""Shared fixtures: the tiny model, free ports, configs. Tiers are folders: unit, integration, e2e, ui."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import lanes, tiny_model
from tests.harness.paths import CACHE


@pytest.fixture(autouse=True)
def _ernie_ops_logger_restored():
    """`ernie-ops serve` (cli.main in a test) points the ernie_ops logger at the sys.stdout of that moment,
    pytest's capture, closed after the test; a later test's log line then printed '--- Logging error ---'
    with a traceback into its own captured output. Each test gets the logger back as it found it."""
    log = logging.getLogger("ernie_ops")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


PROJECT = Path(__file__).resolve().parent.parent
# a tier that cannot run here skips locally and fails under CI (ERNIE_OPS_REQUIRE_ALL_TIERS, .ci/run)
pytest_plugins = ("tests.harness.tiers", "tests.harness.budget")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets its tier's marker; the lane groups (tests/harness/lanes.py) are collected in the order the lanes
    take them (a stable sort: a module's tests keep their order)."""
    for item in items:
        item.add_marker(getattr(pytest.mark, _under_tests(item).split("/")[0]))
    items.sort(key=lambda item: lanes.rank(lanes.group_of(_under_tests(item))))


def _under_tests(item: pytest.Item) -> str:
    return Path(str(item.fspath)).relative_to(PROJECT / "tests").as_posix()


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist loadscope` (make test's lanes): a group of tests is a work unit (tests/harness/lanes.py `scope_of`),
    not a module. xdist's own `loadgroup` cannot be used: it renames the node ids (`@group`), which pytest 9 ignores."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lanes.scope_of(nodeid.split("::", 1)[0].removeprefix("tests/"))

    return LaneScheduling(config, log)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Seconds (setup + call + teardown) and the budget (engines, playbook runs, hosts, browser sessions) per module
    and per tier, then each lane's seconds: where the suite's time goes (tests/harness/budget.py)."""
    from tests.harness import budget  # the plugin (pytest_plugins) by then: imported earlier, pytest could not rewrite it

    if not budget.seconds():
        return
    terminalreporter.write_sep("=", "seconds and budget per module")
    for line in budget.table(budget.seconds(), budget.counts()):
        terminalreporter.write_line(line)
    lanes_line = "lanes (test seconds per xdist worker): " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(budget.lanes().items()))
    terminalreporter.write_line(lanes_line)
    if os.environ.get("ERNIE_OPS_REQUIRE_ALL_TIERS") == "1":  # CI (.ci/run): its output is not kept when it passes, this is
        from tests.harness.paths import ARTIFACTS

        lines = [*budget.table(budget.seconds(), budget.counts()), lanes_line]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"suite-budget-{time.strftime('%Y%m%d-%H%M%S')}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return tiny_model.cached(CACHE / "models")


@pytest.fixture
def short_tmp() -> Path:
    """A short work dir: vLLM's IPC socket paths under TMPDIR must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="eo-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


VLLM_CACHE = CACHE / "vllm-cache"


def write_config(path: Path, model_dir: Path, ports: list[int], cache_dir: Path, **sections: dict) -> Path:
    """A config for the tiny model on CPU; `sections` override keys per section."""
    data = {
        "model": {"path": str(model_dir), "served_name": tiny_model.SERVED_NAME},
        "vllm": {
            "accelerator": "cpu",
            "max_model_len": 2048,
            "enforce_eager": True,  # CPU start-up 43-67 s instead of 66-162 s (measured on this kit's CPU hosts)
            "cpu_kvcache_space_gib": 1,
            "shutdown_drain_seconds": 30,
            "stop_grace_seconds": 10,
            # one vLLM cache for every engine the tests start: vLLM inspects the model class in a subprocess at each
            # start unless its cache (modelinfos/) has the answer; a fresh cache per test cost each start 20-30 s on
            # 2 cores (measured: 55-64 s cold, 27 s warm). A host's instance keeps its own cache across restarts.
            "env": {"VLLM_CACHE_ROOT": str(VLLM_CACHE)},
        },
        "instances": [{"port": p} for p in ports],
        "paths": {"cache_dir": str(cache_dir), "state_dir": str(cache_dir / "state")},
        "chat": {  # never /var/lib or /etc on the test machine
            "docs": {"index_file": str(cache_dir / "docs" / "index.sqlite")},
            "onboarding": {"push_log": str(cache_dir / "onboarding" / "pushlog.sqlite"), "hr": {"file": str(cache_dir / "hr-export.csv")}},
        },
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
