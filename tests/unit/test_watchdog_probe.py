"""The serving launcher's /health probe under systemd's watchdog (launcher.probe_timeout): a slow answer counts as
long as it can still be pinged in time; a small watchdog keeps the old short probe."""

from __future__ import annotations

import pytest

from ernie_ops.serving.launcher import PING_MARGIN, probe_timeout


def test_without_a_watchdog_the_probe_waits_the_configured_timeout_at_most_an_interval():
    assert probe_timeout(5.0, 10.0, None, 0.0) == 5.0
    assert probe_timeout(5.0, 0.5, None, 0.0) == 0.5


@pytest.mark.parametrize(("since_ping", "expected"), [(10.0, 18.0), (20.0, 8.0), (26.0, 5.0), (40.0, 5.0)])
def test_a_slow_answer_may_take_what_is_left_of_the_watchdog_budget(since_ping, expected):
    """WatchdogSec=30, pings every 10 s, health.request_timeout_seconds 5: 10 s after a ping the probe may wait 18 s
    (a busy engine answering in 12 s is pinged at 22 s, before systemd's 30 s), never less than the 5 s it had."""
    assert probe_timeout(5.0, 10.0, 30.0, since_ping) == pytest.approx(expected)
    assert since_ping + probe_timeout(5.0, 10.0, 30.0, since_ping) <= max(30.0 - PING_MARGIN, since_ping + 5.0)


def test_a_small_watchdog_keeps_the_short_probe():
    """The integration test's WatchdogSec=1.5 s: pings every 0.5 s, a probe of 0.5 s, as before."""
    assert probe_timeout(5.0, 0.5, 1.5, 0.5) == 0.5
