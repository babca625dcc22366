"""prometheus/ernie-ops.rules.yml through Debian's promtool: the file checks, its unit tests pass, and every alert
has a firing case, a silent case and a case on an idle host (tests/unit tier: no server, promtool evaluates the
rules on synthetic series)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness import tiers

PROM = Path(__file__).resolve().parents[2] / "prometheus"
RULES = PROM / "ernie-ops.rules.yml"
TESTS = sorted((PROM / "tests").glob("*.test.yml"))
PROMTOOL = shutil.which("promtool")

if PROMTOOL is None:
    pytestmark = tiers.unavailable("promtool is not installed (Debian's prometheus package; `make test` installs it)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def alerts() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def cases() -> dict[str, dict[str, set[str]]]:
    """{alert: {"firing": {test names}, "silent": {...}}} from the promtool test files."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                kind = "firing" if check.get("exp_alerts") else "silent"
                found.setdefault(check["alertname"], {"firing": set(), "silent": set()})[kind].add(test["name"])
    return found


def test_the_rules_file_passes_promtool_check():
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in r.stdout, r.stdout


@pytest.mark.parametrize("path", TESTS, ids=[p.name for p in TESTS])
def test_promtool_unit_tests_pass(path):
    r = promtool("test", "rules", str(path))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_fires_in_a_case_and_stays_silent_in_another_and_on_an_idle_host():
    found = cases()
    idle = {t["name"] for path in TESTS for t in yaml.safe_load(path.read_text())["tests"] if "idle" in t["name"]}
    missing = []
    for alert in alerts():
        got = found.get(alert, {"firing": set(), "silent": set()})
        if not got["firing"]:
            missing.append(f"{alert}: no firing case")
        if not got["silent"]:
            missing.append(f"{alert}: no silent case")
        # an idle host (serving, no traffic) is silent; the disk alert reads no traffic at all
        if not got["silent"] & idle and alert != "ErnieDiskFilling":
            missing.append(f"{alert}: no case on an idle host")
    assert not missing, missing
    assert TESTS and len(found) == len(alerts()), sorted(set(alerts()) ^ set(found))


def test_a_broken_rule_file_is_refused_by_promtool(tmp_path):
    """What the role's validate step relies on: a syntax error and an unknown function fail the check (exit 1)."""
    broken = tmp_path / "broken.rules.yml"
    broken.write_text(RULES.read_text().replace('expr: absent(up{job="ernie-vllm"})', 'expr: absent(up{job="ernie-vllm"}'))
    r = promtool("check", "rules", str(broken))
    assert r.returncode == 1 and "FAILED" in r.stdout + r.stderr, r.stdout + r.stderr
    unknown = tmp_path / "unknown.rules.yml"
    unknown.write_text(RULES.read_text().replace("absent(up", "absnt(up"))
    r = promtool("check", "rules", str(unknown))
    assert r.returncode == 1 and "absnt" in r.stdout + r.stderr, r.stdout + r.stderr
