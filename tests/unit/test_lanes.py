"""The suite's lanes (tests/harness/lanes.py): every test file in one group, the fleet's first."""

from __future__ import annotations

from pathlib import Path

from tests.harness import lanes

TESTS = Path(__file__).resolve().parent.parent


def test_the_fleet_module_is_a_group_of_its_own_and_comes_first():
    assert lanes.group_of("e2e/test_ansible.py") == "fleet"
    assert lanes.group_of("e2e/test_ansible_preflight.py") == "e2e"  # a file, not a prefix
    assert lanes.group_of("e2e/test_cutover.py") == "e2e"
    assert lanes.rank("fleet") == 0 < lanes.rank("e2e") < lanes.rank("unit")


def test_every_test_file_of_the_suite_has_a_group_of_its_tier_or_the_fleet():
    files = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.glob("*/test_*.py"))
    assert len(files) > 50
    groups = {f: lanes.group_of(f) for f in files}
    assert lanes.OTHER not in groups.values(), [f for f, g in groups.items() if g == lanes.OTHER]
    assert all(g == f.split("/")[0] or (f, g) == ("e2e/test_ansible.py", "fleet") for f, g in groups.items()), groups


def test_an_unknown_place_is_other_and_ranks_last():
    assert lanes.group_of("bench/test_x.py") == lanes.OTHER
    assert lanes.rank(lanes.OTHER) == len(lanes.GROUPS)


def test_a_stackless_tiers_modules_are_work_units_of_their_own():
    assert lanes.scope_of("unit/test_config.py") == "unit/test_config.py"
    assert lanes.scope_of("integration/test_serve.py") == "integration"  # its modules share the tier's stacks
    assert lanes.scope_of("e2e/test_cutover.py") == "e2e/test_cutover.py"
    assert lanes.scope_of("e2e/test_ansible.py") == "fleet"
