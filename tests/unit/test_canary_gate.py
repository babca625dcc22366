"""The canary gate's parts that need no server: binomial bounds, histogram deltas and restarts, the access
log's per-instance outcomes, the weighted include, the SLO verdicts, and the config's checks."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import ConfigError
from ernie_ops.traffic import accesslog, gateway
from ernie_ops.traffic.canary import slo, window
from ernie_ops.traffic.canary.window import Histogram
from tests.harness.vllm_metrics import METRICS

SLO = config.SloConfig(max_error_rate=0.01, ttft_quantile=0.99, ttft_seconds=2.0, itl_seconds=0.5, max_ratio=1.5, ratio_floor_seconds=0.0)


# -- bounds ------------------------------------------------------------------------------------------
def test_zero_failures_are_bounded_by_the_rule_of_three_not_read_as_zero():
    assert slo.upper_bound(0, 300, 0.95) == pytest.approx(3 / 300, rel=0.01)
    assert slo.upper_bound(0, 20, 0.95) > 0.13  # "0 of 20" is "at most 14%"
    assert slo.requests_to_pass(0.01, 0.95) == 299  # the fewest requests that can show <= 1% at all
    assert slo.requests_to_pass(0.1, 0.95) == 29


def test_bounds_bracket_the_observed_share_and_narrow_with_more_requests():
    for k, n in ((1, 10), (5, 50), (50, 500), (9, 10)):
        lo, hi = slo.lower_bound(k, n, 0.95), slo.upper_bound(k, n, 0.95)
        assert 0 <= lo < k / n < hi <= 1
    assert slo.upper_bound(5, 500, 0.95) - slo.lower_bound(5, 500, 0.95) < slo.upper_bound(1, 100, 0.95) - slo.lower_bound(1, 100, 0.95)
    assert slo.lower_bound(10, 10, 0.95) == pytest.approx(0.05 ** (1 / 10))


# -- histograms ---------------------------------------------------------------------------------------
def hist(counts: dict[float, float]) -> Histogram:
    return Histogram(tuple(sorted(counts.items())))


def test_above_says_what_is_sure_and_what_is_possible_between_bucket_bounds():
    h = hist({0.1: 10, 0.5: 15, 1.0: 18, math.inf: 20})
    assert h.above(0.5) == (5, 5)  # on a bound: exact
    assert h.above(0.3) == (5, 10)  # inside (0.1, 0.5]: 5 surely above 0.5, 10 possibly above 0.1
    assert h.above(5.0) == (0, 2)  # the +Inf bucket: possibly, never surely


def scrape(a=0, b=0, ok=0, abort=0, error=0, start=1000.0) -> window.Scrape:
    return window.parse(METRICS.format(a=a, b=b, ok=ok, abort=abort, error=error, start=start))


def test_a_window_is_the_difference_of_two_scrapes():
    d = window.delta(scrape(a=10, b=12, ok=12), scrape(a=15, b=20, ok=17, abort=1, error=2), 5.0)
    assert d.ttft.buckets == ((0.1, 5.0), (math.inf, 8.0)) and d.itl.count == 8
    assert d.requests == 8 and d.failed == 3  # error and abort count as failed


@pytest.mark.parametrize(
    ("later", "why"),
    [(scrape(a=1, b=1, ok=1, start=2000.0), "process start time changed"), (scrape(a=1, b=1, ok=1), "went from 12 to 1")],
)
def test_a_restart_in_the_window_voids_it(later, why):
    with pytest.raises(window.Restarted, match=why):
        window.delta(scrape(a=10, b=12, ok=12), later, 5.0)


# -- access log ---------------------------------------------------------------------------------------
def line(uri: str, status: int, upstream: str, ust: str, method: str = "POST") -> str:
    """An access-log line as nginx/ernie-ops.conf's log_format ernie_ops writes it."""
    return json.dumps({"time": "2026-12-01T10:00:00+00:00", "msec": 1.0, "client": "127.0.0.1", "request_id": "r", "method": method,
                       "uri": uri, "status": status, "bytes": 5, "request_time": 0.1, "upstream": upstream,
                       "upstream_status": ust, "upstream_header_time": "0.01", "upstream_response_time": "0.1"}) + "\n"  # fmt: skip


LOG = (
    line("/v1/completions", 200, "127.0.0.1:8001", "200")
    + line("/v1/chat/completions", 500, "127.0.0.1:8001", "500")
    + line("/v1/completions", 200, "127.0.0.1:8001, 127.0.0.1:8000", "502, 200")
    + line("/health", 200, "127.0.0.1:8000", "200", "GET")
    + line("/v1/completions", 401, "", "")
    + line("/v1/completions", 499, "127.0.0.1:8000", "")
    + '127.0.0.1 [01/Dec/2026:10:00:00 +0000] "POST /v1/completions HTTP/1.1" 200 5 upstream="127.0.0.1:8000"\n'  # the old format
)


def test_each_attempt_is_an_outcome_of_the_instance_it_went_to(tmp_path: Path):
    log = tmp_path / "access.log"
    log.write_text("old line before the tail started\n")
    tail = accesslog.Tail(log)
    with log.open("a") as f:
        f.write(LOG + line("/v1/completions", 200, "127.0.0.1:8000", "200")[:40])  # a line still being written
    got = tail.read()
    # 8001: ok, 500, refused (502, then 8000 answered); 8000: that 200 and a client that left (499: not a failure)
    assert dict(got.requests) == {8001: 3, 8000: 2} and dict(got.failed) == {8001: 2}
    with log.open("a") as f:
        f.write(line("/v1/completions", 200, "127.0.0.1:8000", "200")[40:])
    assert dict(tail.read().requests) == {8000: 1}  # the partial line, completed


def test_a_rotated_log_is_followed_and_an_unreadable_one_is_said(tmp_path: Path):
    log = tmp_path / "access.log"
    log.write_text(LOG)
    tail = accesslog.Tail(log)
    os.rename(log, tmp_path / "access.log.1")
    log.write_text(LOG.splitlines(keepends=True)[0])
    assert dict(tail.read().requests) == {8001: 1}
    log.unlink()
    assert not tail.read().requests and "cannot read the gateway's access log" in tail.problem and "gateway.access_log" in tail.problem


# -- the weighted include ----------------------------------------------------------------------------
def test_a_canary_step_is_a_weighted_pair_in_a_shared_zone():
    text = gateway.render_split(8000, 8001, 5)
    assert "zone ernie_vllm" in text and "hash" not in text
    assert gateway.parse_weights(text) == {8000: 95, 8001: 5}
    assert gateway.shares(gateway.parse_weights(text)) == {8000: 95.0, 8001: 5.0}
    assert "hash $ernie_sticky_key consistent;" in gateway.render_split(8000, 8001, 25, "api_key")
    assert "hash $binary_remote_addr consistent;" in gateway.render_split(8000, 8001, 25, "client")
    assert gateway.parse_weights(gateway.render_upstream(8001, 8000)) == {8001: 1}


# -- verdicts ------------------------------------------------------------------------------------------
def side(port, n, failed=0, ttft=0.05, slow=0, slow_ttft=3.0) -> slo.Side:
    """n requests, `slow` of them at slow_ttft, the rest at ttft."""
    bounds = [0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, math.inf]
    counts = {b: (n - slow if ttft <= b else 0) + (slow if slow_ttft <= b else 0) for b in bounds}
    h = hist(counts)
    return slo.Side(port, requests=n, failed=failed, ttft=h, itl=hist({0.02: n * 10, math.inf: n * 10}))


def test_too_few_requests_is_inconclusive_never_a_pass():
    v = slo.judge(side(8001, 40), side(8000, 2000), SLO, min_requests=100)
    assert v.result == slo.INCONCLUSIVE
    assert "0 of 40 failed" in v.reason and "needs >= 299 requests" in v.reason


def test_enough_good_requests_pass():
    v = slo.judge(side(8001, 400), side(8000, 4000), SLO, min_requests=100)
    assert v.result == slo.PASS, v.reason


def test_errors_fail_as_soon_as_the_data_is_sure():
    v = slo.judge(side(8001, 20, failed=3), side(8000, 2000), SLO, min_requests=100)
    assert v.result == slo.FAIL and "3 of 20 failed" in v.reason and "above max_error_rate 1.0%" in v.reason


def test_a_canary_twice_as_slow_as_the_baseline_fails_on_its_share_of_slow_requests():
    base = side(8000, 2000, ttft=0.05, slow=10, slow_ttft=0.25)  # baseline p99 in (0.1, 0.25]
    canary = side(8001, 60, ttft=0.05, slow=12, slow_ttft=1.0)
    v = slo.judge(canary, base, SLO, min_requests=100)
    assert v.result == slo.FAIL and "ttft p99" in v.reason and "1.5x baseline" in v.reason, v.reason


def test_an_absolute_limit_fails_without_any_baseline():
    v = slo.judge(side(8001, 50, slow=10, slow_ttft=5.0), None, SLO, min_requests=10)
    assert v.result == slo.FAIL and "limit 2s" in v.reason


def test_a_canary_that_restarted_or_went_silent_fails():
    v = slo.judge(slo.Side(8001, problem="8001 restarted in the window: its process start time changed"), side(8000, 100), SLO, 10)
    assert v.result == slo.FAIL and "restarted" in v.reason


# -- config --------------------------------------------------------------------------------------------
def test_the_cutover_section_is_checked_with_file_and_line():
    with pytest.raises(ConfigError, match=r"ernie.yaml:2: cutover.canary_steps = \[25, 5\]: steps must rise: 5% after 25%"):
        config.parse("cutover:\n  canary_steps: [25, 5]\n", "ernie.yaml")
    text = (
        "cutover:\n  canary_steps: [5, 25]\n  step_min_seconds: 100\n  step_max_seconds: 50\n  interval_seconds: 2\n  window_seconds: 3\n"
    )
    with pytest.raises(ConfigError) as err:
        config.parse(text, "ernie.yaml")
    said = str(err.value)
    assert "ernie.yaml:4" in said and "below step_min_seconds 100" in said
    assert "ernie.yaml:6" in said and "make it at least 4" in said
    with pytest.raises(ConfigError, match="step 100% is not between 1 and 99"):
        config.parse("cutover:\n  canary_steps: [50, 100]\n")
    with pytest.raises(ConfigError, match="max_error_rate"):
        config.parse("cutover:\n  slo:\n    max_error_rate: 0\n")


def test_exact_bounds_match_clopper_pearson_and_wilson_takes_over_for_large_counts():
    assert slo.upper_bound(1, 10, 0.95) == pytest.approx(0.3942, abs=1e-4)  # published one-sided 95% values
    assert slo.lower_bound(5, 50, 0.95) == pytest.approx(0.0402, abs=1e-4)
    assert slo.lower_bound(1, 2, 0.95) < 0.03  # one slow of two is no evidence (Wilson alone said 12%)
    big = slo.upper_bound(30, 3000, 0.95)
    assert 0.013 < big < 0.0145


def test_one_slow_request_is_no_latency_verdict_however_many_token_gaps_it_has():
    one = slo.Side(8001, requests=1, ttft=hist({5.0: 1, math.inf: 1}), itl=hist({0.02: 0, 5.0: 200, math.inf: 200}))
    v = slo.judge(one, side(8000, 2000), SLO, min_requests=1)
    latency = [c for c in v.checks if c.name.startswith(("ttft", "itl"))]
    assert {c.result for c in latency} == {slo.INCONCLUSIVE} and "10 before any latency verdict" in latency[0].detail


def test_a_ratio_inside_a_bucket_is_judged_at_its_bound_so_a_healthy_canary_can_pass():
    """CI's case: baseline p90 near 0.075 s, 3x inside (0.1, 0.25]; 5 of 35 canary requests in that
    bucket could never be shown under 0.225 s, so the step stayed undecided until step_max rolled it back."""
    slo90 = config.SloConfig(max_error_rate=0.1, ttft_quantile=0.9, ttft_seconds=20.0, itl_quantile=0.9, itl_seconds=10.0, max_ratio=3.0)
    itl = hist({0.02: 350, math.inf: 350})
    base = slo.Side(8000, requests=35, ttft=hist({0.06: 20, 0.08: 33, 0.1: 35, 0.25: 35, math.inf: 35}), itl=itl)
    canary = slo.Side(8001, requests=35, ttft=hist({0.06: 10, 0.08: 25, 0.1: 30, 0.25: 35, math.inf: 35}), itl=itl)
    v = slo.judge(canary, base, slo90, min_requests=20)
    ttft = next(c for c in v.checks if c.name == "ttft p90")
    assert ttft.result == slo.PASS and "<= 0.250s" in ttft.detail and "at its bucket's bound" in ttft.detail, ttft
    slow = slo.Side(8001, requests=35, ttft=hist({0.06: 5, 0.08: 10, 0.1: 15, 0.25: 20, math.inf: 35}), itl=itl)
    assert slo.judge(slow, base, slo90, min_requests=20).result == slo.FAIL  # 15 of 35 surely over: still a fail
