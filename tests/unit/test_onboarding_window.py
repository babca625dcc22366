"""The onboarding window (ernie_ops.onboarding.window): pre-boarding, the start day through start + active_days
(both ends served), then over; and the polite sentence for after it. Dates relative to today."""

from __future__ import annotations

import pytest

from ernie_ops.onboarding.plan import zh_date
from ernie_ops.onboarding.window import OnboardingOver, over_message, window
from tests.harness.dates import day


@pytest.mark.parametrize(
    ("start", "active_days", "phase"),
    [
        (400, 30, "preboarding"),  # however far ahead HR wrote it
        (1, 30, "preboarding"),
        (0, 30, "active"),  # the start day
        (-1, 30, "active"),  # day 2
        (-30, 30, "active"),  # start + active_days: the last day served
        (-31, 30, "over"),
        (0, 0, "active"),
        (-1, 0, "over"),
    ],
)
def test_the_phase_of_today(start, active_days, phase):
    win = window(day(start), day(0), active_days)
    assert (win.phase, win.serves, win.last_day) == (phase, phase != "over", day(start + active_days))


def test_a_negative_length_is_refused():
    with pytest.raises(ValueError, match="active_days must be 0 or more"):
        window(day(0), day(0), -1)


def test_the_over_sentence_names_when_it_ended_and_who_to_ask():
    win = window(day(-40), day(0), 30)
    text = over_message("张伟", win, "李娜")
    assert text.startswith(f"张伟，你好！你的入职引导已于{zh_date(day(-10))}结束（入职日期 {zh_date(day(-40))}）")
    assert "请联系你的直属上级李娜。" in text and f"ended on {day(-10).isoformat()}" in text
    assert "请联系人事部门。" in over_message("张伟", win, None) and "please ask HR" in over_message("张伟", win, "")
    err = OnboardingOver("zhang.wei", "张伟", win, "李娜")
    assert err.message == text and "zhang.wei" in str(err)


def test_zh_date_has_no_leading_zeros():
    d = day(0)
    assert zh_date(d) == f"{d.year}年{d.month}月{d.day}日" and "年0" not in zh_date(d.replace(month=1, day=5))
