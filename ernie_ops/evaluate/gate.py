"""The cutover's quality gate (`cutover.eval`): whether the golden set it names can be used, and the verdict on the
new instance's report (and the old one's, run on the same set) in one sentence, like the cutover's other gates.

Pure apart from `set_problem`, which reads the set; running the set is the host's (`HostOps.evaluate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ernie_ops.config import EvalGateConfig
from ernie_ops.evaluate import golden

if TYPE_CHECKING:  # annotations only: the runner imports the chat, docs and marketing pipelines
    from ernie_ops.evaluate.run import EvalReport

MAX_LISTED = 5  # failing cases named in the sentence; the rest are counted
MAX_REASON = 80  # characters of one case's reasons
EPSILON = 1e-9  # pass rates are sums of float weights: 0.3 - 0.2 must not read as more than 0.1


def set_problem(gate: EvalGateConfig) -> str | None:
    """Why `gate.file` cannot be run, each problem with its file (and line); None when it can (or no gate is set).
    The caller names the key: `cutover.eval.file PATH: <this>`."""
    if gate.file is None:
        return None
    try:
        golden.load(gate.file)  # an empty set is refused there: a gate with nothing to judge would pass any model
    except golden.GoldenSetError as exc:
        return "not a usable golden set: " + "; ".join(str(p) for p in exc.problems)
    return None


def pct(rate: float) -> str:
    """20%, 83.3%, 99.9%: never a rate below 100% shown as 100%."""
    shown = f"{rate * 100:.1f}".removesuffix(".0")
    if shown == "100" and rate < 1.0:
        shown = "99.9"
    return f"{shown}%"


def tally(port: int, report: EvalReport) -> str:
    """`8001 4/5 (80%)`: cases passed of all, and the weighted pass rate."""
    return f"{port} {len(report.cases) - len(report.failing)}/{len(report.cases)} ({pct(report.pass_rate)})"


def failing_cases(report: EvalReport) -> str:
    """`capital-france (missing 'Paris'), days-in-week (missing '7') and 2 more`."""
    named = []
    for case in report.failing[:MAX_LISTED]:
        reason = "; ".join(case.failures)
        reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"
        named.append(f"{case.id} ({reason})" if reason else case.id)
    more = len(report.failing) - len(named)
    return ", ".join(named) + (f" and {more} more" if more else "")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    sentence: str  # the step's detail when ok, the refusal when not


def judge(gate: EvalGateConfig, new_port: int, new: EvalReport, old_port: int | None = None, old: EvalReport | None = None) -> Verdict:
    """The new instance must reach `min_pass_rate` and, when the old one was run, be at most `max_drop` below it."""
    new_rate = new.pass_rate
    below_min = new_rate + EPSILON < gate.min_pass_rate
    drop = (old.pass_rate - new_rate) if old is not None else 0.0
    too_far = old is not None and drop > gate.max_drop + EPSILON
    if not below_min and not too_far:
        if old is None or old_port is None:
            return Verdict(True, f"{tally(new_port, new)}, needs {pct(gate.min_pass_rate)}")
        return Verdict(True, f"{tally(new_port, new)}, {tally(old_port, old)}: within {pct(gate.max_drop)} of the old")
    cases = "case" if len(new.cases) == 1 else "cases"
    passed = f"{new_port} passed {len(new.cases) - len(new.failing)} of {len(new.cases)} {cases} ({pct(new_rate)}"
    old_said = "" if old is None else f"{old_port} passed {len(old.cases) - len(old.failing)} of {len(old.cases)} ({pct(old.pass_rate)})"
    if below_min:
        why = f", needs {pct(gate.min_pass_rate)}" + (f"; {old_said}" if old_said else "") + ")"
    else:
        why = f"; {old_said}: {pct(drop)} lower, at most {pct(gate.max_drop)} allowed)"
    failing = f": failing {failing_cases(new)}" if new.failing else ""
    return Verdict(False, f"quality: {passed}{why}{failing}")
