"""The suite's budget: what each test module costs in the expensive things, printed beside its seconds.

The harness counts at the one place each thing starts: `serve_proc.start` (a real vLLM engine outside systemd; a
stub engine is not counted), `Sandbox.down`/`power_off` (every start of an `ernie-vllm@` unit inside a host, read
from its journal: a stub behind the real launcher counts there too), `sandbox.up` (a host), `Fleet.playbook` (an
ansible-playbook run), `browser.chromium` (a browser session). A count goes to the
module of the test running when it happens: a module-scoped fixture's setup and teardown run inside that
module's first and last test, a package-scoped one inside the first module that asked for it.

The counts ride on the test reports (`user_properties`), so that with the suite's two lanes (pytest-xdist workers,
see tests/conftest.py) the controller, which prints the table, adds up what every worker started.

A change that adds to a column says why in its commit (tests/harness/budget.py is the tally, the commit is the reason).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

KINDS = ("engines", "playbooks", "hosts", "browsers")
PROPERTY = "ernie-ops budget"  # the user_properties entry of a report: {kind: n} started during that phase
_counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
_seconds: dict[str, float] = defaultdict(float)  # test time (setup + call + teardown) per module
_lanes: dict[str, float] = defaultdict(float)  # test time per xdist worker (one lane, "main", when run without)
_pending: dict[str, int] = dict.fromkeys(KINDS, 0)  # started since the last report of this process


def count(kind: str, n: int = 1) -> None:
    """Add `n` of `kind` (one of KINDS) to the test running now (its next report carries it)."""
    if kind not in KINDS:
        raise ValueError(f"budget: unknown kind {kind!r}; one of {', '.join(KINDS)}")
    _pending[kind] += n


def counts() -> dict[str, dict[str, int]]:
    """{module: {kind: n}} of the reports seen so far (a copy)."""
    return {module: dict(row) for module, row in _counts.items()}


def seconds() -> dict[str, float]:
    """{module: seconds of test time} of the reports seen so far."""
    return dict(_seconds)


def lanes() -> dict[str, float]:
    """{lane: seconds of test time} of the reports seen so far: a worker's id (gw0, ...), or "main" without xdist."""
    return dict(_lanes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if any(_pending.values()):
        report.user_properties.append((PROPERTY, dict(_pending)))
        _pending.update(dict.fromkeys(KINDS, 0))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the process that prints (xdist's controller, or the only one): each report adds what it carries."""
    module = report.nodeid.split("::", 1)[0]
    for name, value in report.user_properties:
        if name == PROPERTY:
            for kind, n in value.items():
                _counts[module][kind] += n
    _seconds[module] += report.duration
    node = getattr(report, "node", None)  # xdist: the worker that ran it
    _lanes[node.gateway.id if node is not None else "main"] += report.duration


def table(seconds: dict[str, float], budget: dict[str, dict[str, int]]) -> list[str]:
    """Rows of seconds and counts per module (slowest first), then per tier, then the total."""
    zero = dict.fromkeys(KINDS, 0)
    head = f"{'seconds':>8}  {'engines':>7} {'playbooks':>9} {'hosts':>5} {'browsers':>8}  module"

    def row(label: str, secs: float, c: dict[str, int]) -> str:
        return f"{secs:8.1f}  {c['engines']:7d} {c['playbooks']:9d} {c['hosts']:5d} {c['browsers']:8d}  {label}"

    modules = sorted(set(seconds) | set(budget), key=lambda m: -seconds.get(m, 0.0))
    lines = [head] + [row(m, seconds.get(m, 0.0), budget.get(m, zero)) for m in modules]
    tiers: dict[str, tuple[float, dict[str, int]]] = {}
    for m in modules:
        parts = m.split("/")
        tier = parts[1] if m.startswith("tests/") and len(parts) > 2 else "other"
        secs, c = tiers.get(tier, (0.0, dict(zero)))
        tiers[tier] = (secs + seconds.get(m, 0.0), {k: c[k] + budget.get(m, zero)[k] for k in KINDS})
    lines.append("-" * len(head))
    for tier, (secs, c) in sorted(tiers.items(), key=lambda kv: -kv[1][0]):
        lines.append(row(f"tier {tier}", secs, c))
    total = {k: sum(c[k] for _, c in tiers.values()) for k in KINDS}
    lines.append(row("total", sum(s for s, _ in tiers.values()), total))
    return lines
