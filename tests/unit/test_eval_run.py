"""Scoring and `run_set` with a client that gives fixed answers (the scoring is logic; the docs cases still run the
chat app's real retrieval, prompt, clean-up and citation code over a real temporary index)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.client.gateway import ChatError
from ernie_ops.evaluate import golden, run, score
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import zh_date
from ernie_ops.onboarding.service import WELCOME_RULES
from tests.harness.dates import day


class FixedAnswers:
    """Answers by a keyword of the newest user message (the docs prompt holds the question); records each request."""

    def __init__(self, answers: dict[str, str], fail: ChatError | None = None):
        self.answers, self.fail, self.requests = answers, fail, []

    async def stream(self, messages, max_tokens, temperature, stats=None, extra=None, session=None):
        self.requests.append({"messages": messages, "max_tokens": max_tokens, "temperature": temperature})
        if self.fail is not None:
            raise self.fail
        newest = messages[-1]["content"]
        answer = next((a for k, a in self.answers.items() if k in newest), "I do not know.")
        for i in range(0, len(answer), 7):  # in pieces, as a stream arrives
            yield answer[i : i + 7]


SET = """
defaults: {max_tokens: 33, system: "Answer briefly."}
cases:
  - id: france
    messages: [{role: user, content: "What is the capital of France?"}]
    must_include: [paris]
    must_not_include: [lyon]
  - id: upload
    docs:
      question: What is the maximum upload size?
      passages: ["The maximum upload size is 25 MB per file.", "Each upload is kept for 90 days and then deleted."]
    must_include: ["25 MB"]
    weight: 2
"""


def loaded(text: str = SET, base: Path = Path(".")) -> golden.Loaded:
    return golden.Loaded(golden.parse(text), base)


def test_phrases_are_matched_case_insensitively_unless_asked_and_after_nfkc():
    assert score.phrase_failures("The capital is PARIS.", ["paris"], ["lyon"]) == []
    assert score.phrase_failures("The capital is PARIS.", ["paris"], [], case_sensitive=True) == ["missing 'paris'"]
    assert score.phrase_failures("Lyon, not Paris", ["Paris"], ["lyon"]) == ["contains 'lyon'"]
    assert score.phrase_failures("上限为２５ MB", ["25 MB"], []) == []  # full-width digits


def test_citations_must_exist_and_point_at_a_passage_holding_an_expected_phrase():
    passages = ["The limit is 25 MB.", "Files are kept 90 days."]
    assert score.citation_failures([1], passages, ["25 MB"]) == []
    assert score.citation_failures([], passages, ["25 MB"]) == ["cites no passage"]
    assert score.citation_failures([1, 2], passages, ["25 mb"]) == ["cites 【2】, which holds none of ['25 mb']"]


def test_the_pass_rate_is_weighted():
    assert score.pass_rate([(True, 1.0), (False, 2.0), (True, 1.0)]) == 0.5
    assert score.pass_rate([]) == 0.0


def test_right_answers_pass_and_requests_are_greedy_with_the_sets_limit():
    client = FixedAnswers({"France": "The capital of France is Paris.", "upload size": "The maximum upload size is 25 MB per file."})
    report = run.run_set(loaded(), client)
    assert [(c.id, c.passed, c.failures) for c in report.cases] == [("france", True, []), ("upload", True, [])]
    assert report.pass_rate == 1.0
    assert report.cases[1].cited == [1]
    assert {(r["max_tokens"], r["temperature"]) for r in client.requests} == {(33, 0.0)}
    assert client.requests[0]["messages"][0] == {"role": "system", "content": "Answer briefly."}
    docs_prompt = client.requests[1]["messages"][-1]["content"]  # the chat app's numbered passages and the question
    assert "【1】(passage-1.txt)\n> The maximum upload size is 25 MB per file." in docs_prompt
    assert docs_prompt.endswith("What is the maximum upload size?")


def test_wrong_answers_fail_with_the_phrase_that_failed_and_the_weighted_rate():
    client = FixedAnswers({"France": "Lyon is the capital of France.", "upload size": "Each upload is kept for 90 days and then deleted."})
    report = run.run_set(loaded(), client)
    assert [(c.id, c.failures) for c in report.failing] == [
        ("france", ["missing 'paris'", "contains 'lyon'"]),
        ("upload", ["missing '25 MB'", "cites 【2】, which holds none of ['25 MB']"]),
    ]
    assert report.failing[0].answer == "Lyon is the capital of France."
    assert report.pass_rate == 0.0
    half = run.run_set(loaded(), FixedAnswers({"France": "Paris.", "upload size": "I cannot say."}))
    assert half.pass_rate == pytest.approx(1 / 3)  # weights 1 and 2
    assert half.as_dict()["results"][1]["failures"] == ["missing '25 MB'", "cites no passage"]


def test_a_docs_question_the_passages_do_not_answer_fails_without_asking_the_model():
    text = SET.replace("What is the maximum upload size?", "Who won the football world cup in 1954?")
    client = FixedAnswers({})
    report = run.run_set(loaded(text), client)
    assert report.cases[1].failures[0].startswith("retrieval found no passage that answers it")
    assert len(client.requests) == 1  # only the messages case reached the model


def test_an_unreachable_model_stops_the_run_and_other_errors_fail_the_case():
    down = FixedAnswers({}, fail=ChatError("down", "ConnectError: refused (after one retry)"))
    refused = r"cannot reach http://127.0.0.1:9: ConnectError: refused \(after one retry\); start the instance"
    with pytest.raises(run.TargetDown, match=refused):
        run.run_set(loaded(), down, target=run.Target("http://127.0.0.1:9", "m"))
    slow = run.run_set(loaded(), FixedAnswers({}, fail=ChatError("timeout", "no data for 120s")))
    assert [c.failures for c in slow.cases] == [["no answer: timeout: no data for 120s"]] * 2


def test_files_of_a_docs_case_are_read_relative_to_the_set(tmp_path: Path):
    (tmp_path / "policy.md").write_text("# Passwords\n\nThe minimum password length is 12 characters.\n")
    text = "cases:\n  - id: pw\n    docs: {question: 'What is the minimum password length?', files: [policy.md]}\n"
    text += "    must_include: ['12']\n"
    (tmp_path / "set.yaml").write_text(text)
    client = FixedAnswers({"password length": "The minimum password length is 12 characters."})
    report = run.run_set(golden.load(tmp_path / "set.yaml"), client)
    assert report.cases[0].passed, report.cases[0].failures
    assert "(policy.md" in client.requests[0]["messages"][-1]["content"]


COPY = """
cases:
  - id: tea
    copy: {product: Green tea, selling_points: fresh leaves, audience: office workers, max_chars: 60, posts: 2}
    must_not_include: [cheap]
"""


class CopyAnswers:
    """Answers a marketing request with the next of `posts` as the JSON the writer asks for; records each request."""

    def __init__(self, posts: list[str]):
        self.posts, self.requests = list(posts), []

    async def stream(self, messages, max_tokens, temperature, stats=None, extra=None, session=None):
        self.requests.append({"temperature": temperature, "extra": extra})
        yield json.dumps({"posts": [self.posts.pop(0)]}, ensure_ascii=False)


def test_a_copy_case_passes_when_every_post_is_within_the_rules():
    client = CopyAnswers(["Fresh green tea for the office afternoon.", "A calm cup between two meetings."])
    report = run.run_set(loaded(COPY), client)
    assert (report.cases[0].passed, report.cases[0].failures) == (True, [])
    assert report.cases[0].answer == "Fresh green tea for the office afternoon.\n---\nA calm cup between two meetings."
    assert {r["temperature"] for r in client.requests} == {0.0}  # greedy, whatever chat.marketing.temperature says
    assert all(r["extra"]["response_format"]["type"] == "json_schema" for r in client.requests)


def test_a_copy_case_fails_on_a_post_the_rules_refuse_after_its_tries_or_on_a_phrase():
    too_long = "Green tea " * 20
    client = CopyAnswers(["A calm cup of green tea.", too_long, too_long, too_long])  # chat.marketing.max_attempts: 3
    report = run.run_set(loaded(COPY), client)
    assert report.cases[0].failures[0].startswith("post 2: too_long")
    assert report.cases[0].failures[0].endswith("after 3 tries")
    cheap = run.run_set(loaded(COPY), CopyAnswers(["The best cheap tea in town.", "Cheap and cheerful green tea."]))
    failures = cheap.cases[0].failures
    assert "post 1: contains 'cheap'" in failures and "post 2: contains 'cheap'" in failures


def test_first_try_makes_a_regenerated_post_fail():
    text = COPY.replace("posts: 2}", "posts: 1, first_try: true}")
    report = run.run_set(loaded(text), CopyAnswers(["Green tea " * 20, "A calm cup of green tea."]))
    assert report.cases[0].failures == ["post 1: within the rules only at try 2"]


ONBOARDING = """
cases:
  - id: welcome-engineer
    onboarding: {name: 王小明, department: 研发部, role: 后端工程师, manager: 李雷, start_in_days: 3}
    must_include: [王小明]
"""


def welcome(start: date) -> str:
    return f"欢迎王小明加入研发部！你将担任后端工程师，入职日期是{zh_date(start)}，直属上级是李雷。期待与你一起成长！"


def test_an_onboarding_welcome_that_says_only_the_records_facts_passes_and_is_asked_for_as_the_helper_does():
    client = FixedAnswers({"王小明": welcome(day(3))})
    report = run.run_set(loaded(ONBOARDING), client)
    assert [(c.id, c.kind, c.passed, c.failures) for c in report.cases] == [("welcome-engineer", "onboarding", True, [])]
    assert report.cases[0].answer == welcome(day(3))
    (request,) = client.requests
    assert (request["max_tokens"], request["temperature"]) == (OnboardingConfig().welcome_max_tokens, 0.0)  # greedy
    system, user = request["messages"]
    assert system["content"].startswith(run.onboarding_scenario().system_prompt.strip())
    assert system["content"].endswith(WELCOME_RULES)
    assert json.loads(user["content"]) == {  # the facts only, the start date counted from today
        "name": "王小明", "department": "研发部", "role": "后端工程师", "start_date": day(3).isoformat(), "manager": "李雷",
    }  # fmt: skip


def test_an_onboarding_welcome_the_fact_check_refuses_fails_with_the_reason():
    wrong_day = run.run_set(loaded(ONBOARDING), FixedAnswers({"王小明": welcome(day(4))}))
    (failure,) = wrong_day.cases[0].failures
    assert failure.startswith(f"fact check: the model's welcome names the date '{zh_date(day(4))}'")
    assert failure.endswith(f"the start date is {day(3).isoformat()}")
    salary = run.run_set(loaded(ONBOARDING), FixedAnswers({"王小明": welcome(day(3)) + "你的月薪是五万元。"}))
    assert salary.cases[0].failures == ["fact check: the model's welcome holds '五万元', a number that is not among the facts"]
    other_dept = run.run_set(loaded(ONBOARDING), FixedAnswers({"王小明": "欢迎王小明加入市场部！"}))
    assert other_dept.cases[0].failures == ["fact check: the model's welcome names the department '市场部', the record's is '研发部'"]
    assert wrong_day.pass_rate == salary.pass_rate == other_dept.pass_rate == 0.0


def test_an_onboarding_welcome_missing_a_phrase_fails_and_one_without_phrases_is_judged_by_the_fact_check_alone():
    report = run.run_set(loaded(ONBOARDING), FixedAnswers({"王小明": "欢迎加入研发部！期待与你一起成长。"}))
    assert report.cases[0].failures == ["missing '王小明'"]
    bare = ONBOARDING.replace("    must_include: [王小明]\n", "")
    assert run.run_set(loaded(bare), FixedAnswers({"王小明": "欢迎加入研发部！"})).pass_rate == 1.0
    assert run.run_set(loaded(bare), FixedAnswers({"王小明": "欢迎加入研发部！试用期三个月。"})).pass_rate == 0.0


def test_an_onboarding_case_uses_the_targets_onboarding_config_and_stops_when_the_model_is_down():
    cfg = OnboardingConfig.model_validate({"welcome_max_tokens": 40, "templates": {"departments": {"市场部": {}, "研发部": {}}}})
    target = run.Target("http://127.0.0.1:9", "m", onboarding=cfg)
    client = FixedAnswers({"王小明": "王小明，欢迎你！市场部的同事也向你问好。"})  # a department the templates know, not the record's
    report = run.run_set(loaded(ONBOARDING), client, target=target)
    assert report.cases[0].failures == ["fact check: the model's welcome names the department '市场部', the record's is '研发部'"]
    assert client.requests[0]["max_tokens"] == 40
    down = FixedAnswers({}, fail=ChatError("down", "ConnectError: refused"))
    with pytest.raises(run.TargetDown, match=r"cannot reach http://127\.0\.0\.1:9: ConnectError: refused"):
        run.run_set(loaded(ONBOARDING), down, target=target)
    slow = run.run_set(loaded(ONBOARDING), FixedAnswers({}, fail=ChatError("timeout", "no data for 120s")))
    assert slow.cases[0].failures == ["no answer: timeout: no data for 120s"]


def test_the_target_carries_the_configs_onboarding_section():
    base = config.Config()
    onboarding = base.chat.onboarding.model_copy(update={"welcome_max_tokens": 77})
    cfg = base.model_copy(update={"chat": base.chat.model_copy(update={"onboarding": onboarding})})
    assert run.Target.for_instance(cfg, 8001).onboarding.welcome_max_tokens == 77
