"""The cutover's quality gate (`cutover.eval`): the golden set run against the new instance (and the old one) after
the probe gate and before any traffic moves. The runbook runs against the FAKE host (tests/harness/runbook_host.py),
whose `evaluate` returns scripted reports: what is tested here is the runbook's decision and undo, not the model
(the real models' answers are in tests/integration/test_cutover_quality.py). The set itself is the shipped
smoke set, loaded for real by the preflight; the config and `config check` are real too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_ops import cli, config
from ernie_ops.errors import ConfigError
from ernie_ops.evaluate import gate
from ernie_ops.evaluate.run import CaseResult, EvalReport, TargetDown
from ernie_ops.host import state
from ernie_ops.traffic import cutover
from ernie_ops.traffic.canary import rollout, rollout_file
from tests.harness.runbook_host import MUTATIONS, NEW, OLD, FakeHost

SMOKE = Path(config.__file__).parent / "data" / "eval" / "smoke.yaml"
ALL_PASS = [("capital-france", True), ("capital-germany", True), ("days-in-week", True), ("docs-upload-size", True)]
ONE_PASSES = [("capital-france", False), ("capital-germany", False), ("days-in-week", True), ("docs-upload-size", False)]


def make_cfg(tmp_path: Path, **gate_keys: object) -> config.Config:
    keys = "".join(f"    {k}: {v}\n" for k, v in gate_keys.items())
    text = f"gateway:\n  url: http://127.0.0.1:9\npaths:\n  state_dir: {tmp_path / 'state'}\n"
    text += f"cutover:\n  eval:\n{keys}" if keys else ""
    cfg = config.parse(text)
    state.record(tmp_path / "state", {"kind": "cutover", "target": OLD}, active_port=OLD, previous_port=None)
    return cfg


def evaluated(host: FakeHost) -> list[int]:
    return [c[1] for c in host.calls if c[0] == "evaluate"]


def assert_refused_before_traffic_moved(res, host: FakeHost) -> None:
    assert res.outcome == "aborted" and not res.ok, res
    assert [(s.name, s.ok) for s in res.steps][-2:] == [("quality", False), ("undo: stop new", True)]
    assert host.mutations() == [("start", NEW), ("stop", NEW)]  # never switched, split or enabled
    assert (host.file_port, host.live_port) == (OLD, OLD) and host.units == {OLD: "active", NEW: "inactive"}
    assert res.traffic == OLD and res.where == "the old instance 8000 keeps serving"


# -- the runbook --------------------------------------------------------------------------------------


def test_without_a_set_there_is_no_quality_step_and_nothing_is_evaluated(tmp_path):
    cfg = make_cfg(tmp_path)
    assert cfg.cutover.eval.file is None  # off by default
    host = FakeHost()
    res = cutover.Cutover(cfg, NEW, host=host).run()
    assert res.outcome == "switched" and "quality" not in [s.name for s in res.steps]
    assert evaluated(host) == []


def test_a_new_instance_below_the_minimum_is_refused_naming_its_failing_cases(tmp_path):
    host = FakeHost(evals={NEW: ONE_PASSES, OLD: ALL_PASS})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host).run()
    assert_refused_before_traffic_moved(res, host)
    assert res.error == (
        "quality: 8001 passed 1 of 4 cases (25%, needs 100%; 8000 passed 4 of 4 (100%)): failing "
        "capital-france (missing 'answer-capital-france'), capital-germany (missing 'answer-capital-germany'), "
        "docs-upload-size (missing 'answer-docs-upload-size')"
    )
    assert evaluated(host) == [NEW, OLD]  # both, on the same set, before the switch
    assert state.load(tmp_path / "state").history[-1]["outcome"] == "aborted"


def test_a_drop_beyond_max_drop_against_the_old_instance_is_refused_naming_both_rates(tmp_path):
    three_of_four = [*ALL_PASS[:3], ("docs-upload-size", False)]
    host = FakeHost(evals={NEW: three_of_four, OLD: ALL_PASS})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE, min_pass_rate=0.5, max_drop=0.1), NEW, host=host).run()
    assert_refused_before_traffic_moved(res, host)
    assert res.error == (
        "quality: 8001 passed 3 of 4 cases (75%; 8000 passed 4 of 4 (100%): 25% lower, at most 10% allowed): "
        "failing docs-upload-size (missing 'answer-docs-upload-size')"
    )


def test_a_drop_within_max_drop_and_above_the_minimum_passes(tmp_path):
    three_of_four = [*ALL_PASS[:3], ("docs-upload-size", False)]
    host = FakeHost(evals={NEW: three_of_four, OLD: ALL_PASS})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE, min_pass_rate=0.5, max_drop=0.25), NEW, host=host).run()
    assert res.outcome == "switched", res
    quality = next(s for s in res.steps if s.name == "quality")
    assert quality.ok and quality.detail == "8001 3/4 (75%), 8000 4/4 (100%): within 25% of the old"


def test_a_new_instance_that_passes_is_switched_after_the_gate(tmp_path):
    host = FakeHost(evals={NEW: ALL_PASS, OLD: ALL_PASS})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host).run()
    assert res.outcome == "switched" and res.ok and res.traffic == NEW, res
    names = [s.name for s in res.steps]
    assert names[: names.index("switch") + 1] == ["preflight", "start", "gate", "quality", "switch"]
    assert res.steps[names.index("quality")].detail == "8001 4/4 (100%), 8000 4/4 (100%): within 0% of the old"
    assert host.calls.index(("evaluate", OLD)) < host.calls.index(("switch", NEW))


def test_a_new_instance_that_cannot_be_reached_during_the_eval_is_refused_with_that_reason(tmp_path):
    down = TargetDown("cannot reach http://127.0.0.1:8001: ConnectError: connection refused; start the instance or check --port")
    host = FakeHost(evals={NEW: down})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host).run()
    assert_refused_before_traffic_moved(res, host)
    assert res.error == str(down)
    assert evaluated(host) == [NEW]  # the old one is not asked: nothing to compare


def test_an_old_instance_that_cannot_be_evaluated_does_not_hold_the_new_one_back(tmp_path):
    """Moving away from a broken instance must stay possible: the new one is judged by min_pass_rate alone."""
    host = FakeHost(evals={NEW: ALL_PASS, OLD: TargetDown("cannot reach http://127.0.0.1:8000: ReadTimeout")})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host).run()
    assert res.outcome == "switched", res
    assert next(s for s in res.steps if s.name == "quality").detail == "8001 4/4 (100%), needs 100%"
    assert any("the old instance 8000 could not be evaluated (cannot reach" in w for w in res.warnings), res.warnings


def test_a_canary_is_refused_before_its_watch_starts(tmp_path):
    host = FakeHost(evals={NEW: ONE_PASSES, OLD: ALL_PASS})
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host, plan=rollout.Plan([5, 50], 0)).run()
    assert_refused_before_traffic_moved(res, host)  # no split to 5% either
    assert rollout_file.load(tmp_path / "state") is None  # no rollout was ever started
    assert not [s for s in res.steps if s.name.startswith(("step", "watch", "canary", "bake"))], res.steps


def test_a_rollback_is_not_gated(tmp_path):
    """Going back to the instance that served must stay quick, and possible when the set is what broke."""
    cfg = make_cfg(tmp_path, file=SMOKE)
    state.record(tmp_path / "state", {"kind": "cutover", "target": NEW}, active_port=NEW, previous_port=OLD)
    host = FakeHost(file_port=NEW, live_port=NEW, units={OLD: "inactive", NEW: "active"}, evals={OLD: ONE_PASSES})
    res = cutover.rollback(cfg, host=host)
    assert res.ok and res.target == OLD and "quality" not in [s.name for s in res.steps], res
    assert evaluated(host) == []


# -- the set is checked before anything starts -------------------------------------------------------


@pytest.mark.parametrize("dry_run", [False, True], ids=["cutover", "dry-run"])
def test_a_missing_set_stops_the_preflight_before_anything_starts(tmp_path, dry_run):
    missing = tmp_path / "gone.yaml"
    host = FakeHost()
    res = cutover.Cutover(make_cfg(tmp_path, file=missing), NEW, host=host, dry_run=dry_run).run()
    assert res.outcome == "aborted" and [(s.name, s.ok) for s in res.steps] == [("preflight", False)]
    said = f"cutover.eval.file {missing}: not a usable golden set: {missing}: (file): not found; give the path of a golden set (YAML)"
    assert res.error == said
    assert not [c for c in host.calls if c[0] in MUTATIONS | {"unit_state", "gate", "evaluate"}]


def test_a_dry_run_loads_the_set_but_does_not_run_it(tmp_path):
    host = FakeHost()
    res = cutover.Cutover(make_cfg(tmp_path, file=SMOKE), NEW, host=host, dry_run=True).run()
    assert res.outcome == "dry-run" and res.ok and evaluated(host) == []


def test_an_invalid_set_is_named_with_its_line_at_the_preflight(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases:\n  - id: a\n    messages: [{role: user, content: hi}]\n")
    res = cutover.Cutover(make_cfg(tmp_path, file=bad), NEW, host=FakeHost()).run()
    assert res.outcome == "aborted"
    assert res.error.startswith(f"cutover.eval.file {bad}: not a usable golden set: {bad}:2: cases[0]:"), res.error


# -- config -------------------------------------------------------------------------------------------


def problems(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        config.parse(text, "ernie.yaml")
    return {p.field: str(p) for p in info.value.problems}


def test_config_refuses_bad_rates_an_unknown_key_and_a_relative_file():
    found = problems("cutover:\n  eval:\n    file: eval/smoke.yaml\n    min_pass_rate: 1.5\n    max_drop: -0.1\n    min_pass: 1\n")
    assert set(found) == {"cutover.eval.file", "cutover.eval.min_pass_rate", "cutover.eval.max_drop", "cutover.eval.min_pass"}
    assert "ernie.yaml:3: cutover.eval.file = 'eval/smoke.yaml': " in found["cutover.eval.file"]
    assert "must be the absolute path of the golden set" in found["cutover.eval.file"]
    assert "ernie.yaml:4: cutover.eval.min_pass_rate = 1.5" in found["cutover.eval.min_pass_rate"]
    assert "ernie.yaml:5: cutover.eval.max_drop = -0.1" in found["cutover.eval.max_drop"]
    assert "ernie.yaml:6: cutover.eval.min_pass" in found["cutover.eval.min_pass"] and "min_pass_rate" in found["cutover.eval.min_pass"]


def test_config_check_reports_a_missing_or_invalid_set_in_one_sentence(tmp_path, capsys):
    cfg_file = tmp_path / "ernie.yaml"
    missing = tmp_path / "gone.yaml"
    cfg_file.write_text(f"cutover:\n  eval:\n    file: {missing}\n")
    assert cli.main(["--config", str(cfg_file), "config", "check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg_file}: cutover.eval.file = '{missing}': not a usable golden set: {missing}: (file): not found" in err, err
    assert "Traceback" not in err

    bad = tmp_path / "bad.yaml"
    bad.write_text("cases:\n  - id: a\n    messages: [{role: user, content: hi}]\n    must_include: []\n")
    cfg_file.write_text(f"cutover:\n  eval:\n    file: {bad}\n")
    assert cli.main(["--config", str(cfg_file), "config", "check", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    [problem] = out["problems"]
    assert problem["field"] == "cutover.eval.file" and problem["value"] == str(bad)
    assert problem["message"].startswith(f"not a usable golden set: {bad}:2: cases[0]:"), problem

    cfg_file.write_text(f"cutover:\n  eval:\n    file: {SMOKE}\n")
    assert cli.main(["--config", str(cfg_file), "config", "check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["cutover"]["eval"] == {"file": str(SMOKE), "min_pass_rate": 1.0, "max_drop": 0.0}


# -- the sentence -------------------------------------------------------------------------------------


def report(passed: list[bool]) -> EvalReport:
    return EvalReport([CaseResult(f"c{i}", "messages", 1.0, ok, "", [] if ok else ["missing 'x'"]) for i, ok in enumerate(passed)])


def test_the_failing_list_is_capped_and_counts_the_rest():
    verdict = gate.judge(config.EvalGateConfig(file="/s.yaml"), NEW, report([False] * 8))
    assert not verdict.ok
    assert verdict.sentence.endswith("c3 (missing 'x'), c4 (missing 'x') and 3 more")
    assert verdict.sentence.startswith("quality: 8001 passed 0 of 8 cases (0%, needs 100%): failing c0 (missing 'x')")


def test_a_rate_just_below_the_minimum_is_never_shown_as_the_minimum():
    verdict = gate.judge(config.EvalGateConfig(file="/s.yaml"), NEW, report([True] * 999 + [False]))
    assert not verdict.ok and "(99.9%, needs 100%)" in verdict.sentence
