"""Waiting for a condition a test needs, instead of sleeping and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(what: str, check: Callable[[], T], timeout: float, every: float = 2.0) -> tuple[T, float]:
    """`check()`'s first truthy value and the seconds it took; AssertionError naming `what` after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = check()
        if got:
            return got, time.monotonic() - t0
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")
