"""Durations people write on the command line: '600', '90s', '10m', '1.5h', '7d', '2w' -> seconds. The one parser
behind the cutover's --bake, `logs --since` and `chat feedback --since`; each command says which units it takes
and words its own refusal."""

from __future__ import annotations

import re
from collections.abc import Collection

PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
CLOCK = ("ms", "s", "m", "h")  # the units of a wait or a look back in the same hour or day (--bake, logs --since)


def seconds(text: str, units: Collection[str], *, bare: bool = True, whole: bool = False) -> float | None:
    """The duration in seconds, or None when `text` is not one: a number with one of `units`, or without a unit
    when `bare` (seconds); `whole`: the number must be an integer."""
    m = PATTERN.match(text)
    if not m or (whole and "." in m.group(1)):
        return None
    unit = m.group(2)
    if (unit is None and not bare) or (unit is not None and unit not in units):
        return None
    return float(m.group(1)) * SECONDS[unit or "s"]
