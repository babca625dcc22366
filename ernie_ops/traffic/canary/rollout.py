"""A cutover that watches before it commits: canary steps, then a bake window, each judged from data.

After the target passed the gate (cutover.py steps 1-3), instead of switching all traffic at once:

  canary   for each step of `--canary 5,25,50`: nginx sends that share to the target (weighted servers,
           shared zone, optionally sticky); the step is held at least `step_min_seconds` and until the
           gate passes (slo.judge over the step's window: enough requests, errors and latency within
           the SLOs and near the baseline's); a fail rolls back at once, a step still inconclusive after
           `step_max_seconds` too.
  switch   100% to the target (the cutover's own switch + verify).
  bake     `--bake DURATION`: the source stays loaded and unrouted; the target is judged every interval
           over the recent window and the whole bake; a fail routes back to the source at once (warm:
           no cold start).
  retire   the source is drained and stopped (only now), the target enabled at boot.

A rollback routes everything to the source (nginx graceful reload: in-flight streams on either side
finish on the old workers), then drains and stops the target. Every decision (each step's window,
counts, quantiles, verdict) is written to the journal (syslog ident `ernie-ops`), to the rollout file
(`rollout_file`, the live state `ernie-ops status` shows) and to the history in state.json.

`kill -9` at any point leaves the rollout file naming the phase and the weights nginx has: `status` says
nobody watches, and a re-run of `ernie-ops cutover PORT` (same target) takes the rollout over where it
stands; `--abort` routes back to the source and retires the target; `--promote` routes to the target
and retires the source.
"""

from __future__ import annotations

import os
import signal
import syslog
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ernie_ops import durations
from ernie_ops.config import CutoverConfig, steps_problem
from ernie_ops.errors import UsageError
from ernie_ops.traffic.canary import rollout_file, slo
from ernie_ops.traffic.canary.rollout_file import Rollout
from ernie_ops.traffic.canary.watch import Meter, RealMeter, Windows, feed
from ernie_ops.traffic.runbook import CutoverResult, Outcome, Runbook, Step


def parse_duration(text: str) -> float:
    """'600', '90s', '10m', '1.5h' -> seconds."""
    value = durations.seconds(text, durations.CLOCK)
    if value is None:
        raise UsageError(f"'{text}' is not a duration; write seconds or a number with s, m or h (e.g. 10m)")
    return value


def parse_steps(text: str) -> list[int]:
    """'5,25,50' -> [5, 25, 50]; rising percentages between 1 and 99."""
    try:
        steps = [int(p) for p in text.replace("%", "").split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"'{text}' is not a list of percentages; write e.g. --canary 5,25,50") from None
    if steps_problem(steps) is not None:
        raise UsageError(f"--canary {text}: steps must rise between 1 and 99 percent (100% follows the last step by itself)")
    return steps


@dataclass(frozen=True)
class Plan:
    steps: list[int]
    bake_seconds: float
    sticky: str = "none"

    @classmethod
    def chosen(cls, co: CutoverConfig, canary: str | None = None, bake: str | None = None, sticky: str | None = None) -> Plan:
        """From `--canary STEPS`, `--bake DURATION`, `--sticky` where given, else from the config's cutover section."""
        steps = parse_steps(canary) if canary is not None else list(co.canary_steps)
        bake_seconds = parse_duration(bake) if bake is not None else co.bake_seconds
        return cls(steps, bake_seconds, sticky or co.sticky)

    @property
    def watched(self) -> bool:
        return bool(self.steps) or self.bake_seconds > 0

    def describe(self) -> str:
        parts = []
        if self.steps:
            parts.append("canary " + ",".join(f"{s}%" for s in self.steps) + (f" (sticky: {self.sticky})" if self.sticky != "none" else ""))
        if self.bake_seconds:
            parts.append(f"bake {self.bake_seconds:g}s")
        return " then ".join(parts) or "no watch"


def abort_on_signals(state_dir: Path) -> None:
    """Ctrl-C (SIGINT) or SIGTERM while a cutover watches: roll back at the next evaluation, as `--abort` would;
    a second one interrupts at once (the rollout then stays for `status` and `--abort`, like a kill). Before the
    watch has begun (start, gate) it interrupts as it always did."""

    def ask(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not (state_dir / rollout_file.FILE).exists():
            raise KeyboardInterrupt  # the watch has not begun: interrupt as without a watch
        rollout_file.request(state_dir, "abort")

    signal.signal(signal.SIGINT, ask)
    signal.signal(signal.SIGTERM, ask)


def journal(message: str) -> None:
    """One decision to the system log (the journal on a systemd host); never fails the rollout."""
    try:
        syslog.openlog("ernie-ops", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_INFO, message)
    except OSError:
        pass


class Watch:
    """Drives the cutover that started it (`cut`, a `runbook.Runbook`) through its public verbs only. Its own
    verbs: `run` (from where the rollout file stands), `promote` and `roll_back` (end it now), `decide`."""

    def __init__(self, cut: Runbook, record: Rollout, meter_factory: Callable[[list[int]], Meter] | None = None):
        self.cut = cut
        self.cfg = cut.cfg
        self.co = cut.cfg.cutover
        self.host = cut.host
        self.r = record
        self.state_dir = cut.state_dir
        self.meter_factory = meter_factory or (lambda ports: RealMeter(cut.cfg, ports))
        self.meter: Meter | None = None

    # -- bookkeeping -----------------------------------------------------------------------
    def _save(self) -> None:
        self.r.pid = os.getpid()
        try:
            rollout_file.save(self.state_dir, self.r)
        except rollout_file.RolloutFileError as exc:
            if str(exc) not in self.cut.result.warnings:
                self.cut.warn(str(exc))

    def decide(self, what: str, text: str, verdict: slo.Verdict | None = None, seconds: float = 0.0) -> None:
        entry = {"at": self.host.wall(), "what": what, "text": text}
        if verdict is not None:
            entry["verdict"] = verdict.as_dict()
        self.r.decisions.append(entry)
        self._save()
        journal(f"cutover {self.r.source} -> {self.r.target}: {what}: {text}")
        self.cut.report(Step(what, verdict is None or verdict.result != slo.FAIL, seconds, text))

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> CutoverResult:
        """From where the rollout file says it stands (a fresh rollout starts at step 0 of the canary)."""
        self.meter = self.meter_factory([self.r.source, self.r.target])
        try:
            return self._run()
        except Exception as exc:  # a fault of the watch itself: the safe end is the old instance
            return self.roll_back(f"the watch itself failed ({type(exc).__name__}: {exc})")
        finally:
            self.meter.close()

    def _run(self) -> CutoverResult:
        r = self.r
        if r.phase == "canary":
            for i in range(r.step, len(r.steps)):
                r.step, r.percent = i, r.steps[i]
                r.phase_started = self.host.wall()
                self._save()  # before nginx is touched: a kill from here on leaves a record of what may be live
                t0 = time.monotonic()
                try:
                    self.cut.split(r.source, r.target, r.percent, r.sticky)
                except Exception as exc:
                    return self.roll_back(f"nginx refused step {i + 1} ({r.percent}%): {exc}")
                self.decide(
                    f"canary {i + 1}/{len(r.steps)}",
                    f"{r.percent}% to {r.target}, {100 - r.percent}% to {r.source}, nginx reloaded",
                    seconds=time.monotonic() - t0,
                )
                outcome = self._watch_step()
                if outcome != "pass":
                    return self._end(outcome)
            r.phase, r.percent = "bake", 100
            r.phase_started = self.host.wall()
            r.bake_until = self.host.wall() + r.bake_seconds
        self._save()
        if (failed := self._switch_all()) is not None:
            return failed
        if r.bake_until is None:
            r.bake_until = self.host.wall() + r.bake_seconds
        self._save()
        if r.bake_seconds > 0:
            outcome = self._watch_bake()
            if outcome != "pass":
                return self._end(outcome)
        return self._promoted()

    def _end(self, ending: str) -> CutoverResult:
        """A watch that did not pass: 'promote' (asked from another shell), or the reason to roll back."""
        return self.promote() if ending == "promote" else self.roll_back(ending)

    def _switch_all(self) -> CutoverResult | None:
        """All traffic to the target (the cutover's switch + verify); on a failure, the rollback's result."""
        try:
            self.cut.switch()
        except Exception as exc:
            return self.roll_back(f"switching all traffic to {self.r.target} failed: {exc}")
        return None

    # -- watching --------------------------------------------------------------------------
    def _first_tick(self) -> Windows:
        return Windows(self.meter.tick(), self.co.window_seconds)

    def _judge(self, w: Windows, recent: bool = False) -> slo.Verdict:
        side = w.recent_side if recent else w.phase
        bake = self.r.phase == "bake"
        return slo.judge(side(self.r.target), side(self.r.source), self.co.slo, self.co.step_min_requests, compare_latency=not bake)

    def _feed(self, w: Windows, v: slo.Verdict) -> None:
        """Synthetic requests to a side with too few, and to both while undecided (`watch.feed`)."""
        feed(self.meter, w, (self.r.source, self.r.target), slo.target_requests(self.co.slo, self.co.step_min_requests), v)

    def _next(self, w: Windows) -> str | None:
        """Wait one interval and measure. A promote/abort request from another shell ends the watch: returned
        as what the watch returns ('promote', or the reason to roll back)."""
        self.host.sleep(self.co.interval_seconds)
        tick = self.meter.tick()
        w.add(tick)
        if tick.problem is not None and not any(tick.problem in x for x in self.cut.result.warnings):
            # said once: the gate then judges errors from vLLM's counters and its own requests only
            self.cut.warn(f"{tick.problem}; errors are judged from vLLM's counters only")
            journal(f"cutover {self.r.source} -> {self.r.target}: {tick.problem}")
        asked = rollout_file.take_request(self.state_dir)
        if asked is None:
            return None
        self.decide(asked, f"requested by `ernie-ops cutover --{asked}`")
        return "promote" if asked == "promote" else "aborted by `ernie-ops cutover --abort`"

    def _live(self, v: slo.Verdict) -> None:
        self.r.verdict, self.r.verdict_at = v.as_dict(), self.host.wall()
        self._save()

    def _watch_step(self) -> str:
        """'pass', 'promote', or the reason to roll back."""
        w = self._first_tick()
        label = f"canary {self.r.step + 1}/{len(self.r.steps)}"
        while True:
            if (asked := self._next(w)) is not None:
                return asked
            v = self._judge(w)
            self._live(v)
            self._feed(w, v)
            if v.result == slo.FAIL:
                self.decide(label, f"FAIL after {w.seconds:.1f}s: {v.reason}", v, w.seconds)
                return f"{label} ({self.r.percent}%) failed the gate: {v.reason}"
            if v.result == slo.PASS and w.seconds >= self.co.step_min_seconds:
                self.decide(label, f"pass after {w.seconds:.1f}s: {v.reason}", v, w.seconds)
                return "pass"
            if w.seconds >= self.co.step_max_seconds:
                self.decide(label, f"still {v.result} after {w.seconds:.1f}s: {v.reason}", v, w.seconds)
                return f"{label} ({self.r.percent}%) could not be judged within step_max_seconds {self.co.step_max_seconds:g}: {v.reason}"

    def _watch_bake(self) -> str:
        w = self._first_tick()
        while True:
            if (asked := self._next(w)) is not None:
                return asked
            whole, recent = self._judge(w), self._judge(w, recent=True)
            self._live(whole if whole.result == slo.FAIL or recent.result != slo.FAIL else recent)
            self._feed(w, whole)
            for name, v in (("recent window", recent), ("bake so far", whole)):
                if v.result == slo.FAIL:
                    self.decide("bake", f"FAIL ({name}) after {w.seconds:.1f}s: {v.reason}", v, w.seconds)
                    return f"the bake window failed the gate ({name}): {v.reason}"
            left = (self.r.bake_until or 0) - self.host.wall()
            if left <= 0 and whole.result == slo.PASS:
                self.decide("bake", f"pass after {w.seconds:.1f}s: {whole.reason}", whole, w.seconds)
                return "pass"
            if left <= -self.co.step_max_seconds:
                self.decide("bake", f"still {whole.result} {-left:.0f}s past its end: {whole.reason}", whole, w.seconds)
                return f"the bake window could not be judged: {whole.reason}"

    # -- endings ---------------------------------------------------------------------------
    def _quiet(self) -> None:
        """The gate's own requests stop before any drain (a drain waits for zero requests in flight)."""
        if self.meter is not None:
            self.meter.quiet()

    def promote(self) -> CutoverResult:
        """End with the target: all traffic to it first if the canary still splits it, then retire the source."""
        if self.r.phase == "canary" and (failed := self._switch_all()) is not None:
            return failed
        return self._promoted()

    def _promoted(self) -> CutoverResult:
        """All traffic is on the target: the source is retired."""
        res = self.cut.result
        self._quiet()
        self.r.phase, self.r.percent = "promote", 100
        self._save()  # a kill from here on: a re-run finishes the promotion, never starts the watch again
        res.outcome, res.ok, res.traffic = Outcome.PROMOTED, True, self.r.target
        self.decide("promote", f"all traffic on {self.r.target}; retiring {self.r.source}")
        self.cut.follow_at_boot(self.r.source)
        self.cut.retire(self.r.source)
        self._finish()
        return res

    def roll_back(self, reason: str) -> CutoverResult:
        """All traffic back on the source (still warm), then the target drains and stops."""
        res = self.cut.result
        self._quiet()
        self.r.phase, self.r.ending = "rollback", reason
        self._save()  # a kill from here on: a re-run finishes the rollback, never sends traffic to the target again
        t0 = time.monotonic()
        try:
            self.cut.route_to(self.r.source)
        except Exception as exc:
            return self._stuck(reason, exc)
        self.decide("rollback", f"{reason}; traffic back on {self.r.source} in {time.monotonic() - t0:.2f}s", seconds=time.monotonic() - t0)
        res.outcome, res.ok, res.error = Outcome.ROLLED_BACK, False, reason
        res.traffic = self.cut.serving_port()
        res.where = (
            f"traffic is back on {self.r.source} (it never stopped); {self.r.target} was stopped"
            if res.traffic == self.r.source
            else self.cut.where()
        )
        self.cut.retire(self.r.target)
        self._finish()
        return res

    def _stuck(self, reason: str, exc: Exception) -> CutoverResult:
        """Routing back failed: nothing is stopped (the target may still carry traffic) and the rollout file
        stays, so `ernie-ops status` keeps saying so and `--abort` can try again."""
        res = self.cut.result
        self.decide("rollback", f"{reason}; routing back to {self.r.source} FAILED: {exc}; both instances left running")
        res.outcome, res.ok = Outcome.ROLLBACK_FAILED, False
        res.error = f"{reason}; then routing back to {self.r.source} failed: {exc}"
        res.traffic = self.cut.serving_port()
        res.where = self.cut.where() + "; both instances run; fix nginx, then `ernie-ops cutover --abort`"
        self._record()
        return res

    def _record(self) -> None:
        """The outcome, the plan and every decision to state.json's history."""
        self.cut.result.source = self.r.source
        self.cut.record(extra={"plan": Plan(self.r.steps, self.r.bake_seconds, self.r.sticky).describe(), "decisions": self.r.decisions})

    def _finish(self) -> None:
        self._record()
        rollout_file.clear(self.state_dir)


def start_record(target: int, source: int, plan: Plan) -> Rollout:
    r = Rollout(target=target, source=source, steps=list(plan.steps), bake_seconds=plan.bake_seconds, sticky=plan.sticky)
    if not plan.steps:
        r.phase, r.percent = "bake", 100
    return r
