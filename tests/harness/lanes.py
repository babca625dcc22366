"""The suite's two lanes: `make test` runs pytest-xdist with two workers, `--dist loadscope --no-loadscope-reorder`.

Every test belongs to one group, and a group runs whole on one worker (tests/conftest.py's scheduler), so a stack
a module or tier shares (the provisioned fleet, the integration tier's engines, the UI tier's host) is started
once, as in a serial run. The groups are collected in the order below and a worker takes the next group when it
runs out of work: the fleet (the longest: 17 minutes on an AMX Xeon, 34 on an AMD EPYC) starts at once in one lane
while the other lane works through the rest.

Why two: the machines this runs on have two cores, and a serial run left a third of them idle (the UI tier used
67% of both cores; the e2e tier waits on bake windows, drains and timeouts). More lanes than cores would only
make each stack slower to start.
"""

from __future__ import annotations

# (group, test paths under tests/ it holds: a file or a folder), in the order the lanes take them
GROUPS = (
    ("fleet", ("e2e/test_ansible.py",)),  # the three-host fleet and its 10 playbook runs
    ("e2e", ("e2e/",)),
    ("integration", ("integration/",)),
    ("ui", ("ui/",)),
    ("unit", ("unit/",)),
)
OTHER = "other"
# groups whose modules share no stack (module-scoped fixtures only): each module is a work unit of its own, so either
# lane takes the next one (a whole unit group went to the fleet's lane behind its last test while the other lane sat
# idle). The integration tier's engines and the UI tier's host are shared by the whole group (package fixtures).
SPREAD = frozenset({"e2e", "unit"})


def group_of(path: str) -> str:
    """The group of a test file, `path` relative to tests/ (the first entry of GROUPS that holds it)."""
    for name, holds in GROUPS:
        if any(path == h or (h.endswith("/") and path.startswith(h)) for h in holds):
            return name
    return OTHER


def scope_of(path: str) -> str:
    """The work unit a test file belongs to: its group, or the file itself in a SPREAD group."""
    group = group_of(path)
    return path if group in SPREAD else group


def rank(group: str) -> int:
    """Where a group comes in the collection (the order the lanes take them); unknown groups last."""
    names = [name for name, _ in GROUPS]
    return names.index(group) if group in names else len(names)
