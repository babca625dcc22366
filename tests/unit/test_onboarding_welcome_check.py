"""The welcome checked against the HR record (ernie_ops.onboarding.welcome_check.mismatch): pure logic on
zh and en welcomes. The start date is relative to today; the texts write it in the formats a model (or
the plain welcome) uses."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ernie_ops.onboarding.plan import Facts, fallback_welcome
from ernie_ops.onboarding.welcome_check import mismatch
from tests.harness.dates import day, when_run


def start():
    return day(5)


def other():
    return start() + timedelta(days=1)


def facts():
    return Facts("zhang.wei", "张伟", "研发", "SRE", start(), "李娜")


def m():
    return start().month


def d():
    return start().day


CN = "〇一二三四五六七八九十"


def cn(n: int) -> str:
    """1..31 in Chinese numerals (十二, 二十五), as a model may write a date."""
    return CN[n] if n <= 10 else ("十" if n < 20 else CN[n // 10] + "十") + (CN[n % 10] if n % 10 else "")


@pytest.mark.parametrize(
    "text",
    [
        "欢迎张伟加入研发部！期待与你一起成长。",
        "张伟你好，欢迎加入我们的研发团队，成为团队的一员！第一周加油。",
        lambda: f"欢迎张伟！你将于{m()}月{d()}日正式入职研发，你的直属上级是李娜，有问题可以随时问她。",
        lambda: f"欢迎！你的入职日期是{start().year}年{m()}月{d()}日，岗位是SRE。",
        lambda: f"欢迎！入职日期 {start().isoformat()}，请向李娜老师报到。",
        lambda: f"欢迎！{cn(m())}月{cn(d())}日见，你将担任SRE工程师。",
        "祝你在新的岗位上十分顺利，万事如意！",
        lambda: f"Welcome aboard, 张伟! We're excited to have you on the team from {start():%B} {d()}.",
        lambda: f"Welcome to the team! Your first day is {start():%b} {d()}, {start().year}, and your manager is 李娜.",
        "Welcome, 张伟! As a new member of our team you will do great things.",
    ],
)
def test_a_welcome_that_says_only_the_records_facts_is_accepted(text):
    assert mismatch(when_run(text), facts()) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("欢迎张三加入市场部！", "names the department '市场部', the record's is '研发'"),
        ("欢迎加入我们的产品中心，张伟！", "names the department '产品中心'"),
        ("Welcome to the Marketing team, 张伟!", "names the department 'Marketing'"),
        ("Welcome to the sales department!", "names the department 'sales'"),
        ("欢迎！你的岗位是后端工程师。", "names the role '后端工程师', the record's is 'SRE'"),
        ("Welcome! Your role is Product Manager.", "names the role 'Product Manager'"),
        ("欢迎！你的直属上级是王芳。", "names the manager '王芳', the record's is '李娜'"),
        ("欢迎！入职后请向王芳汇报。", "names the manager '王芳'"),
        ("Welcome! Your manager is Wang Fang.", "names the manager 'Wang Fang'"),
        (
            lambda: f"欢迎！你将于{other().month}月{other().day}日入职。",
            lambda: f"names the date '{other().month}月{other().day}日', the start date is {start()}",
        ),
        (f"欢迎！入职日期 {other().isoformat()}。", f"names the date '{other().isoformat()}'"),
        (f"See you on {other():%B} {other().day}!", f"names the date '{other():%B} {other().day}'"),
        (f"欢迎！{cn(other().month)}月{cn(other().day)}日见。", "names the date"),
        ("欢迎张三加入研发，月薪五万。", "holds '五万', a number that is not among the facts"),
        ("欢迎加入！转正后月薪三千元。", "holds '三千元'"),
        ("欢迎！入职培训为期15天。", "holds '15'"),
        ("欢迎！我们为你准备了两个礼包。", "holds '两个'"),
        ("Welcome! Your salary is 50,000 yuan a month.", "holds '50,000'"),
        ("Welcome! You get twenty days of paid leave.", "holds 'twenty'"),
    ],
)
def test_a_welcome_that_says_what_the_record_does_not_is_refused_with_its_reason(text, reason):
    text, reason = when_run(text), when_run(reason)
    got = mismatch(text, facts())
    assert got is not None and reason in got, got


def test_the_wrong_weekday_is_a_wrong_date():
    right = "一二三四五六日"[start().weekday()]
    wrong = "一二三四五六日"[(start().weekday() + 1) % 7]
    assert mismatch(f"欢迎！周{right}见。", facts()) is None
    assert "names the weekday" in mismatch(f"欢迎！周{wrong}见。", facts())


def test_without_a_manager_on_the_record_any_manager_named_is_invented():
    facts = Facts("li.lei", "李雷", "市场", "专员", start(), None)
    assert "names the manager '李娜', the record's is '(none)'" in mismatch("欢迎！你的直属上级是李娜。", facts)


def test_a_department_or_role_the_templates_know_is_wrong_wherever_it_appears():
    text = "欢迎！市场的同事们也很期待见到你，SRE 们也是。"
    assert mismatch(text, facts()) is None  # not said as the employee's: only the templates' names catch it
    assert "names the department '市场'" in mismatch(text, facts(), departments=["研发", "市场"])
    backend = Facts("li.lei", "李雷", "研发", "后端", start(), "李娜")
    assert "names the role 'SRE'" in mismatch("欢迎！SRE 们很期待见到你。", backend, roles=["SRE", "后端"])


def test_digits_the_record_itself_holds_are_facts():
    facts = Facts("e7", "王五", "二组", "P7", start(), "李娜")
    assert mismatch("欢迎王五加入二组！你的岗位是P7。", facts) is None


@pytest.mark.parametrize(
    "facts",
    [  # dated when run
        lambda: facts(),
        lambda: Facts("li.lei", "李雷", "市场部", "", start(), None),
        lambda: Facts("li.lei", "李雷", "研发", "P7", day(-3), "王五"),
        lambda: Facts("li.lei", "Li Lei", "Engineering", "SRE 2", start(), "Wang Fang"),
    ],
)
def test_the_plain_welcome_passes_its_own_check(facts):
    facts = when_run(facts)
    assert mismatch(fallback_welcome(facts), facts) is None
