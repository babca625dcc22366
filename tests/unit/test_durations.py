"""The one duration parser (ernie_ops/durations.py); each command's own words for a refusal are tested with it
(test_rollout_runbook.py, test_logview.py, test_chat_feedback.py)."""

from __future__ import annotations

import pytest

from ernie_ops import durations

ALL = ("ms", "s", "m", "h", "d", "w")


@pytest.mark.parametrize(
    ("text", "seconds"), [("600", 600), (" 90s ", 90), ("1.5h", 5400), ("250ms", 0.25), ("7d", 604800), ("2w", 1209600)]
)
def test_a_number_and_a_unit_are_seconds(text, seconds):
    assert durations.seconds(text, ALL) == pytest.approx(seconds)


def test_a_command_says_which_units_a_bare_number_and_a_fraction_it_takes():
    assert durations.seconds("5d", ("ms", "s", "m", "h")) is None  # the canary's bake takes no days
    assert durations.seconds("600", ("d",), bare=False) is None  # feedback's --since wants a unit
    assert durations.seconds("1.5d", ("d",), whole=True) is None and durations.seconds("2d", ("d",), whole=True) == 172800
    for text in ("", "ten minutes", "-5m", "5 days", "m"):
        assert durations.seconds(text, ALL) is None, text
