"""The golden set's schema: every problem of a file at once, each with file:line, field and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from ernie_ops.evaluate import golden

SMOKE = Path(golden.__file__).parent.parent / "data" / "eval" / "smoke.yaml"


def problems(text: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "set.yaml"
    path.write_text(text)
    with pytest.raises(golden.GoldenSetError) as exc:
        golden.load(path)
    return [str(p).replace(str(tmp_path) + "/", "") for p in exc.value.problems]


def test_the_example_set_loads_with_messages_and_docs_cases():
    loaded = golden.load(SMOKE)
    kinds = {c.kind for c in loaded.golden.cases}
    assert kinds == {"messages", "docs"}
    assert loaded.base_dir == SMOKE.parent


def test_every_problem_is_reported_at_once_with_its_line_and_field(tmp_path: Path):
    text = """defaults:
  max_tokens: 0
cases:
  - id: a
    messages: [{role: user, content: hi}]
    must_inclde: [x]
  - id: b
    messages: [{role: bot, content: hi}]
    must_include: [x]
  - id: c
    docs: {question: q}
    must_include: [""]
"""
    got = problems(text, tmp_path)
    assert got == [
        "set.yaml:2: defaults.max_tokens = 0: Input should be greater than or equal to 1",
        "set.yaml:6: cases[0].must_inclde = ['x']: unknown key (did you mean 'must_include'?); allowed here: "
        "id, messages, docs, copy, onboarding, must_include, must_not_include, case_sensitive, weight",
        "set.yaml:8: cases[1].messages[0].role = 'bot': Input should be 'system', 'user' or 'assistant'",
        "set.yaml:11: cases[2].docs: give the passages (`passages` and/or `files`) or a `collection` "
        "of the configured index, one of the two",
        "set.yaml:12: cases[2].must_include = ['']: an empty phrase matches every answer; remove it",
    ]


def test_a_case_kind_the_set_does_not_know_is_an_unknown_key(tmp_path: Path):
    got = problems("cases:\n  - id: a\n    onboard: {login: x}\n    must_include: [y]\n", tmp_path)
    assert got[0].startswith(
        "set.yaml:3: cases[0].onboard = {'login': 'x'}: unknown key (did you mean 'onboarding'?); "
        "allowed here: id, messages, docs, copy, onboarding,"
    )


ONBOARDING = """cases:
  - id: welcome-engineer
    onboarding:
      name: 王小明
      department: 研发部
      role: 后端工程师
      manager: 李雷
      start_in_days: 3
    must_include: [王小明]
  - id: welcome-no-phrase
    onboarding: {name: 韩梅梅, department: 市场部, start_in_days: -2}
"""


def test_an_onboarding_case_loads_and_needs_no_phrase_since_the_fact_check_can_fail_it(tmp_path: Path):
    (tmp_path / "set.yaml").write_text(ONBOARDING)
    first, second = golden.load(tmp_path / "set.yaml").golden.cases
    assert (first.kind, second.kind) == ("onboarding", "onboarding")
    assert first.onboarding is not None and second.onboarding is not None
    assert (first.onboarding.name, first.onboarding.department, first.onboarding.role, first.onboarding.manager) == (
        "王小明", "研发部", "后端工程师", "李雷",
    )  # fmt: skip
    assert (first.onboarding.start_in_days, second.onboarding.start_in_days) == (3, -2)
    assert (second.onboarding.role, second.onboarding.manager, second.onboarding.employee) == ("", None, None)
    assert (second.must_include, second.must_not_include) == ([], [])


def test_bad_onboarding_fields_are_named_with_their_line(tmp_path: Path):
    text = """cases:
  - id: a
    onboarding:
      name: " "
      department: 研发部
      start_date: 3
  - id: b
    onboarding: {name: x, department: y, start_in_days: 400}
  - id: c
    onboarding: {name: x, department: y, start_in_days: 1}
    messages: [{role: user, content: hi}]
    must_include: [x]
"""
    assert problems(text, tmp_path) == [
        "set.yaml:3: cases[0].onboarding.start_in_days: required; add it",
        "set.yaml:4: cases[0].onboarding.name = ' ': blank; write the text (or leave the key out)",
        "set.yaml:6: cases[0].onboarding.start_date = 3: unknown key (did you mean 'start_in_days'?); "
        "allowed here: name, department, role, manager, start_in_days, employee",
        "set.yaml:8: cases[1].onboarding.start_in_days = 400: Input should be less than or equal to 366",
        "set.yaml:9: cases[2]: a case is `messages` (a chat request), `docs` (a document question), `copy` (a marketing "
        "request) or `onboarding` (a new employee's welcome): give exactly one",
    ]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("    messages: [{role: user, content: hi}]\n",
         "give `must_include` and/or `must_not_include`: a case without phrases cannot fail"),
        ("    must_include: [x]\n",
         "a case is `messages` (a chat request), `docs` (a document question), `copy` (a marketing request) "
         "or `onboarding` (a new employee's welcome): give exactly one"),
        ("    messages: [{role: user, content: hi}, {role: assistant, content: yo}]\n    must_include: [x]\n",
         "the last of `messages` must be the user's, the one the model answers"),
        ("    docs: {question: q, passages: [p]}\n    must_not_include: [x]\n",
         "a docs case checks its citations against `must_include`: give the expected phrase(s)"),
    ],
)  # fmt: skip
def test_a_case_that_cannot_be_judged_is_refused(tmp_path: Path, case: str, message: str):
    got = problems("cases:\n  - id: a\n" + case, tmp_path)
    assert got == [f"set.yaml:2: cases[0]: {message}"]


def test_duplicate_ids_and_missing_files_are_named(tmp_path: Path):
    dup = "cases:\n" + "  - {id: a, messages: [{role: user, content: hi}], must_include: [x]}\n" * 2
    assert problems(dup, tmp_path) == [
        "set.yaml:3: cases[1].id = 'a': already the id of cases[0] (line 2); ids name the cases in the report"
    ]
    files = "cases:\n  - id: a\n    docs:\n      question: q\n      files: [nope.md]\n    must_include: [x]\n"
    got = problems(files, tmp_path)
    assert got == [
        f"set.yaml:5: cases[0].docs.files[0] = 'nope.md': no such file under {tmp_path}; paths are relative to the golden set's directory"
    ]


def test_bad_yaml_and_a_missing_file_are_one_sentence(tmp_path: Path):
    assert problems("cases: [", tmp_path)[0].startswith("set.yaml:1: (yaml): not valid YAML")
    with pytest.raises(golden.GoldenSetError, match=r"nope.yaml: \(file\): not found; give the path of a golden set"):
        golden.load(tmp_path / "nope.yaml")
