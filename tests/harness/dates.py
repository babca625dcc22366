"""Dates relative to the day a test runs, for HR records and their checks: a test never holds a calendar date
that one day passes. The onboarding helper serves an employee from before the start date through
chat.onboarding.active_days after it (ernie_ops.onboarding.window), and nothing in ernie_ops/hr or
ernie_ops/onboarding looks at the weekday except the welcome check (which compares a weekday named with the
start date's), so a number of days is all a test needs: `day(5)` is a start date still to come, `day(-2)`
one already gone, `day(0)` today.

Never at import: a module-level `START = day(5)` is computed when pytest collects, and the suite runs for
most of an hour, so a run that passes midnight compares a date of yesterday with today's clock (it did:
nine failures in one CI run, and twelve in a fresh clone through a parameter list). Tests call `day(n)` when
they run, through small functions (`def start(): return day(5)`); a parametrized value that holds a date is a
function of no arguments, resolved by `when_run` in the test body (pytest evaluates parameter lists at
collection); and a test that gives the onboarding service its own `today=` takes it from here too, at the same
moment, so the dates it writes and the day the service compares them with are the same day's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from typing import TypeVar

T = TypeVar("T")


def day(n: int) -> date:
    """Today + n days (n < 0: n days ago)."""
    return date.today() + timedelta(days=n)


def days_from_today(n: int) -> str:
    """`day(n)` as an HR export writes it: ISO, YYYY-MM-DD."""
    return day(n).isoformat()


def when_run(value: T | Callable[[], T]) -> T:
    """A parameter as of the moment the test runs: a function of no arguments is called (it holds a date), any other
    value is itself."""
    return value() if callable(value) else value
