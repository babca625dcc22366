"""The onboarding service (ernie_ops.onboarding.service): the REAL HR export-file connector on a CSV written by
each test, a REAL push log on tmp_path, and an INJECTED write_welcome (so the model's text is known, or
holds a foreign link, or is empty/too long, or waits for a second session). The gateway failing is a real
GatewayClient pointed at a closed port. Only the HR time-out and 401 are STUB finders raising the HRError a
file cannot produce (the SCIM side of those runs for real in tests/integration/test_onboarding_scim.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sqlite3
from pathlib import Path

import pytest

from ernie_ops.client.gateway import ChatError, GatewayClient, Timeouts
from ernie_ops.hr.config import HRConfig
from ernie_ops.hr.export_file import ExportFileConnector
from ernie_ops.hr.model import HRError
from ernie_ops.hr.scim import ScimConnector
from ernie_ops.onboarding import pushlog as pushlog_module
from ernie_ops.onboarding import service
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import Facts, PlanError, build_plan, fallback_welcome
from ernie_ops.onboarding.pushlog import Item, PushLog, PushLogError
from ernie_ops.onboarding.service import (
    ENV_FILE,
    MAX_WELCOME_CHARS,
    WELCOME_RULES,
    Onboarding,
    UnconfiguredConnector,
    card,
    config_problem,
    connector_for,
    finder,
    welcome_messages,
    welcome_writer,
)
from ernie_ops.onboarding.window import OnboardingOver
from tests.harness.dates import day, when_run
from tests.harness.onboarding import TEMPLATES, WELCOME, Writer, make_cfg, write_csv


def today():  # the service's today; every start date below is relative to it
    return day(0)


def start():  # zhang.wei's, still to come: accepted
    return day(5)


def zhang():
    return f"zhang.wei,E1001,张伟,研发,SRE,李娜,{start()}"


def li():
    return f"li.lei,E1002,李雷,市场,专员,,{day(6)}"


def helper(tmp_path: Path, writer=None, cfg=None, log=None, find=None, today=None) -> Onboarding:
    cfg = cfg or make_cfg(tmp_path)
    if find is None:
        find = finder(connector_for(cfg.hr, {}), cfg.hr.lookup)
    return Onboarding(cfg, find, log or PushLog(cfg.push_log), writer or Writer(), today=lambda: day(0) if today is None else today)


def rows_in_log(tmp_path: Path) -> list[tuple]:
    path = tmp_path / "push.sqlite"
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT employee, item_id, kind, content, confirmed_at FROM items ORDER BY seq").fetchall()


def run(coro):
    return asyncio.run(coro)


def expected_plan(cfg: OnboardingConfig):
    return build_plan(Facts("zhang.wei", "张伟", "研发", "SRE", start(), "李娜"), cfg.templates)


# ---- open: pushed once ------------------------------------------------------------------------------


def test_open_pushes_every_item_of_the_plan_once_with_the_models_welcome(tmp_path):
    write_csv(tmp_path, li(), zhang())
    writer = Writer()
    h = helper(tmp_path, writer)
    opened = run(h.open("zhang.wei"))
    assert opened.facts == Facts("zhang.wei", "张伟", "研发", "SRE", start(), "李娜")
    plan = expected_plan(h.cfg)
    assert [(i.item_id, i.kind) for i in opened.items] == [(p.item_id, p.kind) for p in plan.items]
    assert [i.content for i in opened.items] == [WELCOME] + [p.content for p in plan.items[1:]]
    assert [i.content for i in opened.items if i.kind == "task"] == [
        "领取电脑并登录企业邮箱",
        "完成信息安全培训",
        "开通代码仓库权限",
        "加入值班群",
    ]
    assert opened.new == len(plan.items) and not opened.fallback_welcome_used
    assert not any(i.confirmed for i in opened.items)
    assert writer.calls == [(opened.facts, WELCOME_RULES)]
    assert len(rows_in_log(tmp_path)) == len(plan.items)


def test_reload_and_restart_push_nothing_and_do_not_ask_the_model_again(tmp_path):
    write_csv(tmp_path, zhang())
    writer = Writer()
    h = helper(tmp_path, writer)
    first = run(h.open("zhang.wei"))
    again = run(h.open("zhang.wei"))  # a reload / reconnect / second login in this process
    restarted = run(helper(tmp_path, writer).open("zhang.wei"))  # a new app process: a new PushLog on the file
    assert again.items == first.items == restarted.items
    assert (again.new, restarted.new) == (0, 0)
    assert not again.fallback_welcome_used and not restarted.fallback_welcome_used
    assert len(writer.calls) == 1
    assert len(rows_in_log(tmp_path)) == len(first.items)


def test_a_template_added_later_is_pushed_alone_without_asking_the_model(tmp_path):
    write_csv(tmp_path, zhang())
    writer = Writer()
    first = run(helper(tmp_path, writer).open("zhang.wei"))
    more = {**TEMPLATES, "default": {**TEMPLATES["default"], "tasks": [*TEMPLATES["default"]["tasks"], "参加新员工培训"]}}
    later = run(helper(tmp_path, writer, cfg=make_cfg(tmp_path, templates=more)).open("zhang.wei"))
    assert later.new == 1
    assert later.items[: len(first.items)] == first.items  # nothing already pushed is rewritten
    assert later.items[-1].content == "参加新员工培训"
    assert len(writer.calls) == 1


def test_two_sessions_opening_at_once_push_each_item_once_and_show_one_welcome(tmp_path):
    write_csv(tmp_path, zhang())

    async def both():
        barrier = asyncio.Barrier(2)
        a = helper(tmp_path, Writer("欢迎 A", barrier), log=PushLog(tmp_path / "push.sqlite"))
        b = helper(tmp_path, Writer("欢迎 B", barrier), log=PushLog(tmp_path / "push.sqlite"))
        return await asyncio.gather(a.open("zhang.wei"), b.open("zhang.wei"))

    one, two = run(both())
    assert one.items == two.items
    assert one.items[0].content in ("欢迎 A", "欢迎 B")
    assert sorted([one.new, two.new]) == [0, len(one.items)]
    rows = rows_in_log(tmp_path)
    assert len(rows) == len(one.items) == len({r[1] for r in rows})


def test_a_fallback_that_lost_the_race_is_not_reported_as_the_welcome_shown(tmp_path):
    write_csv(tmp_path, zhang())

    async def late_and_failing(facts, system_prompt):  # INJECTED: fails only once the other session has pushed
        for _ in range(500):
            if rows_in_log(tmp_path):
                raise ChatError("down", "injected")
            await asyncio.sleep(0.01)
        raise AssertionError("the other session never pushed")

    async def both():
        a = helper(tmp_path, late_and_failing, log=PushLog(tmp_path / "push.sqlite"))
        b = helper(tmp_path, Writer("欢迎 B"), log=PushLog(tmp_path / "push.sqlite"))
        return await asyncio.gather(a.open("zhang.wei"), b.open("zhang.wei"))

    lost, won = run(both())
    assert lost.items == won.items and won.items[0].content == "欢迎 B"
    assert (lost.new, lost.fallback_welcome_used) == (0, False)


# ---- confirm ------------------------------------------------------------------------------------------


def test_confirm_is_shown_on_the_next_open_and_is_idempotent(tmp_path):
    write_csv(tmp_path, zhang())
    h = helper(tmp_path)
    task = run(h.open("zhang.wei")).items[2]
    confirmed = run(h.confirm("zhang.wei", task.item_id))
    assert confirmed.confirmed and confirmed.item_id == task.item_id
    assert run(h.confirm("zhang.wei", task.item_id)).confirmed_at == confirmed.confirmed_at
    reopened = run(helper(tmp_path).open("zhang.wei"))
    assert [i.item_id for i in reopened.items if i.confirmed] == [task.item_id]
    assert reopened.new == 0


def test_confirm_in_a_new_process_looks_the_login_up_like_open(tmp_path):
    write_csv(tmp_path, zhang())
    cfg = make_cfg(tmp_path, lookup="employeeNumber")
    items = run(helper(tmp_path, cfg=cfg).open("E1001")).items
    assert {r[0] for r in rows_in_log(tmp_path)} == {"zhang.wei"}  # the key is the HR user_name, not the login
    done = run(helper(tmp_path, cfg=cfg).confirm("E1001", items[0].item_id))
    assert done.confirmed and done.employee == "zhang.wei"


def test_confirm_after_open_needs_no_second_hr_lookup(tmp_path):
    path = write_csv(tmp_path, zhang())
    h = helper(tmp_path)
    item = run(h.open("zhang.wei")).items[1]
    path.unlink()  # HR goes away after the page was shown: the 确认 button still works
    assert run(h.confirm("zhang.wei", item.item_id)).confirmed
    with pytest.raises(HRError) as err:  # a process that never opened for this login must look it up
        run(helper(tmp_path).confirm("zhang.wei", item.item_id))
    assert err.value.kind == "down"


def test_another_login_cannot_confirm_this_employees_item(tmp_path):
    write_csv(tmp_path, zhang(), li())
    items = run(helper(tmp_path).open("zhang.wei")).items
    sre_task = next(i for i in items if i.content == "加入值班群")  # li.lei (市场) was never pushed it
    h = helper(tmp_path)
    run(h.open("li.lei"))
    with pytest.raises(PushLogError) as theirs:
        run(h.confirm("li.lei", sre_task.item_id))
    with pytest.raises(PushLogError) as unknown:
        run(h.confirm("li.lei", "task-0000000000000000"))
    assert str(theirs.value).replace(sre_task.item_id, "ID") == str(unknown.value).replace("task-0000000000000000", "ID")
    shared = next(i for i in items if i.content == "完成信息安全培训")  # both were pushed it: li.lei confirms only theirs
    assert run(h.confirm("li.lei", shared.item_id)).employee == "li.lei"
    assert [r for r in rows_in_log(tmp_path) if r[0] == "zhang.wei" and r[4] is not None] == []


# ---- the onboarding window: pre-boarding, the start day .. start + active_days, then over --------------------


def zhang_starting(days_from_today: int) -> str:
    return f"zhang.wei,E1001,张伟,研发,SRE,李娜,{day(days_from_today)}"


@pytest.mark.parametrize("start", [5, 0, -1, -2, -30], ids=["pre-boarding", "start-day", "day-2", "day-3", "last-day-of-30"])
def test_the_helper_serves_from_before_the_start_through_the_last_day_of_the_window(tmp_path, start):
    write_csv(tmp_path, zhang_starting(start))
    cfg = make_cfg(tmp_path)
    assert cfg.active_days == 30  # the default the last case is written for
    opened = run(helper(tmp_path, cfg=cfg).open("zhang.wei"))
    assert opened.facts.start_date == day(start)
    assert opened.new == len(opened.items) == len(build_plan(opened.facts, cfg.templates).items)


def test_day_2_shows_the_items_already_pushed_with_their_confirmations(tmp_path):
    """Pushed and one confirmed the day before the start (pre-boarding); on day 2 the same items, still confirmed."""
    write_csv(tmp_path, zhang_starting(-1))
    before = helper(tmp_path, today=day(-2))
    items = run(before.open("zhang.wei")).items
    run(before.confirm("zhang.wei", items[1].item_id))
    day2 = run(helper(tmp_path).open("zhang.wei"))
    assert day2.new == 0 and [i.item_id for i in day2.items] == [i.item_id for i in items]
    assert [i.item_id for i in day2.items if i.confirmed] == [items[1].item_id]


def test_after_a_restart_an_item_pushed_before_the_start_is_confirmed_inside_the_window(tmp_path):
    write_csv(tmp_path, zhang_starting(-5))
    items = run(helper(tmp_path, today=day(-7)).open("zhang.wei")).items  # pushed in pre-boarding
    restarted = helper(tmp_path)  # a new process, 5 days after the start: nothing opened in it yet
    done = run(restarted.confirm("zhang.wei", items[2].item_id))
    assert done.confirmed and done.employee == "zhang.wei"


@pytest.mark.parametrize(("active_days", "start"), [(30, -31), (30, -2000), (0, -1), (7, -8)])
def test_the_day_after_the_window_says_politely_that_onboarding_is_over_and_pushes_nothing(tmp_path, active_days, start):
    write_csv(tmp_path, zhang_starting(start))
    writer = Writer()
    cfg = make_cfg(tmp_path).model_copy(update={"active_days": active_days})
    with pytest.raises(OnboardingOver) as err:
        run(helper(tmp_path, writer, cfg=cfg).open("zhang.wei"))
    last = day(start + active_days)
    assert err.value.window.last_day == last
    assert err.value.message.startswith(f"张伟，你好！你的入职引导已于{last.year}年{last.month}月{last.day}日结束")
    assert "请联系你的直属上级李娜" in err.value.message
    assert writer.calls == [] and rows_in_log(tmp_path) == []


def test_without_a_manager_the_over_sentence_sends_them_to_hr(tmp_path):
    write_csv(tmp_path, f"li.lei,E1002,李雷,市场,专员,,{day(-31)}")
    with pytest.raises(OnboardingOver) as err:
        run(helper(tmp_path).open("li.lei"))
    assert "请联系人事部门" in err.value.message and "直属上级" not in err.value.message
    assert "please ask HR" in err.value.message


def test_confirming_after_the_window_is_refused_with_the_over_sentence(tmp_path):
    write_csv(tmp_path, zhang_starting(-31))
    items = run(helper(tmp_path, today=day(-1)).open("zhang.wei")).items  # the last day of the window
    with pytest.raises(OnboardingOver):
        run(helper(tmp_path).confirm("zhang.wei", items[1].item_id))  # the day after, in a new process
    clock = [day(-1)]
    late = Onboarding(make_cfg(tmp_path), finder(connector_for(make_cfg(tmp_path).hr, {}), "userName"),
                      PushLog(tmp_path / "push.sqlite"), Writer(), today=lambda: clock[0])  # fmt: skip
    run(late.open("zhang.wei"))
    clock[0] = today()  # the page was left open past midnight: the 确认 button says it is over too
    with pytest.raises(OnboardingOver):
        run(late.confirm("zhang.wei", items[1].item_id))
    assert [r for r in rows_in_log(tmp_path) if r[4] is not None] == []


# ---- bad input: nothing pushed -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "kind"),
    [
        (None, "down"),  # no export file
        ([li()], "not_found"),
        (lambda: [f"zhang.wei,E1001,张伟,,SRE,李娜,{start()}"], "incomplete"),  # dated when run
        (["zhang.wei,E1001,张伟,研发,SRE,李娜,下周一"], "bad_date"),  # unknown format
    ],
)
def test_an_hr_error_from_the_export_file_pushes_nothing(tmp_path, rows, kind):
    rows = when_run(rows)
    if rows is not None:
        write_csv(tmp_path, *rows)
    writer = Writer()
    with pytest.raises(HRError) as err:
        run(helper(tmp_path, writer).open("zhang.wei"))
    assert err.value.kind == kind and err.value.message
    assert writer.calls == [] and rows_in_log(tmp_path) == []


@pytest.mark.parametrize("kind", ["timeout", "unauthorized"])
def test_an_hr_error_a_file_cannot_produce_pushes_nothing(tmp_path, kind):
    def find(login):  # STUB: an export file never times out nor refuses a token
        raise HRError(kind, f"stub for {login}")

    writer = Writer()
    with pytest.raises(HRError) as err:
        run(helper(tmp_path, writer, find=find).open("zhang.wei"))
    assert err.value.kind == kind
    assert writer.calls == [] and rows_in_log(tmp_path) == []


def test_a_record_without_user_name_is_a_plan_error_and_pushes_nothing(tmp_path):
    write_csv(tmp_path, f",E1001,张伟,研发,SRE,李娜,{start()}")
    writer = Writer()
    with pytest.raises(PlanError, match="employee"):
        run(helper(tmp_path, writer, cfg=make_cfg(tmp_path, lookup="employeeNumber")).open("E1001"))
    assert writer.calls == [] and rows_in_log(tmp_path) == []


def test_an_empty_login_is_not_found(tmp_path):
    write_csv(tmp_path, zhang())
    with pytest.raises(HRError) as err:
        run(helper(tmp_path).open("  "))
    assert err.value.kind == "not_found" and rows_in_log(tmp_path) == []


def test_a_busy_push_log_is_an_error_with_nothing_half_written(tmp_path, monkeypatch):
    write_csv(tmp_path, zhang())
    monkeypatch.setattr(pushlog_module, "BUSY_TIMEOUT_MS", 200)
    h = helper(tmp_path)
    other = sqlite3.connect(tmp_path / "push.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a real writer holding the log's write lock
    try:
        with pytest.raises(PushLogError, match="busy"):
            run(h.open("zhang.wei"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert rows_in_log(tmp_path) == []
    assert run(h.open("zhang.wei")).new == len(expected_plan(h.cfg).items)


# ---- the welcome: refused or failed -> fallback, still pushed ----------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["欢迎加入！请先登录 https://evil.example.com/login", "详见 www.example.org", "", "   \n", "欢" * (MAX_WELCOME_CHARS + 1)],
    ids=["foreign-url", "foreign-www", "empty", "blank", "too-long"],
)
def test_a_refused_welcome_is_replaced_by_the_fallback(tmp_path, text, caplog):
    write_csv(tmp_path, zhang())
    with caplog.at_level(logging.WARNING, logger="ernie_ops.onboarding.service"):
        opened = run(helper(tmp_path, Writer(text)).open("zhang.wei"))
    assert opened.fallback_welcome_used
    assert opened.items[0].content == fallback_welcome(opened.facts)
    assert opened.new == len(expected_plan(make_cfg(tmp_path)).items)
    assert "fallback welcome for zhang.wei" in caplog.text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("欢迎张伟加入市场部！期待与你共事。", "names the department '市场部', the record's is '研发'"),
        ("欢迎张伟加入研发，月薪五万，期待与你共事。", "holds '五万', a number that is not among the facts"),
        ("欢迎张伟！你的直属上级是王芳。", "names the manager '王芳', the record's is '李娜'"),
        (lambda: f"欢迎张伟！{day(6).month}月{day(6).day}日见。", lambda: f"the start date is {start()}"),  # dated when run
        ("欢迎！你的同事们在市场等你。", "names the department '市场'"),  # a department the templates know
    ],
    ids=["wrong-department", "invented-salary", "wrong-manager", "wrong-date", "template-department"],
)
def test_a_welcome_that_says_what_the_record_does_not_is_replaced_and_the_reason_logged(tmp_path, text, reason, caplog):
    text, reason = when_run(text), when_run(reason)
    write_csv(tmp_path, zhang())
    with caplog.at_level(logging.WARNING, logger="ernie_ops.onboarding.service"):
        opened = run(helper(tmp_path, Writer(text)).open("zhang.wei"))
    assert opened.fallback_welcome_used and opened.items[0].content == fallback_welcome(opened.facts)
    assert "fallback welcome for zhang.wei: the model's welcome " in caplog.text and reason in caplog.text, caplog.text
    assert rows_in_log(tmp_path)[0][3] == fallback_welcome(opened.facts)  # what is stored for good


@pytest.mark.parametrize(
    "text",
    [
        "欢迎！邮箱在 https://mail.example.com 可以登录。",
        "欢" * MAX_WELCOME_CHARS,
        lambda: f"欢迎张伟加入研发部！你将于{start().month}月{start().day}日入职，直属上级是李娜。",  # dated when run
    ],
    ids=["guide-url", "at-limit", "the-records-own-facts"],
)
def test_a_welcome_within_the_rules_is_kept(tmp_path, text):
    text = when_run(text)
    write_csv(tmp_path, zhang())
    opened = run(helper(tmp_path, Writer(text)).open("zhang.wei"))
    assert not opened.fallback_welcome_used and opened.items[0].content == text


def test_the_gateway_failing_gives_the_fallback_and_the_plan_is_still_pushed(tmp_path, caplog):
    write_csv(tmp_path, zhang())
    with socket.socket() as s:  # bound, not listening: the connection is refused (a real failure, no stub)
        s.bind(("127.0.0.1", 0))
        client = GatewayClient(f"http://127.0.0.1:{s.getsockname()[1]}", "m", Timeouts(connect=2, read=2, reply=5))
        with caplog.at_level(logging.WARNING, logger="ernie_ops.onboarding.service"):
            opened = run(helper(tmp_path, welcome_writer(client, "你是入职助手。", 64)).open("zhang.wei"))
    assert opened.fallback_welcome_used and opened.items[0].content == fallback_welcome(opened.facts)
    assert len(rows_in_log(tmp_path)) == len(expected_plan(make_cfg(tmp_path)).items)
    assert "the gateway failed" in caplog.text
    assert not run(helper(tmp_path, Writer(ChatError("down", "x"))).open("zhang.wei")).fallback_welcome_used  # reload: nothing new


def test_a_writer_failing_otherwise_than_the_gateway_is_not_hidden(tmp_path):
    write_csv(tmp_path, zhang())
    with pytest.raises(ZeroDivisionError):  # a bug is not a model failure: no fallback, nothing pushed
        run(helper(tmp_path, Writer(ZeroDivisionError("bug"))).open("zhang.wei"))
    assert rows_in_log(tmp_path) == []


def test_the_model_is_given_the_facts_only_and_the_rules():
    facts = Facts("zhang.wei", "张伟", "研发", "SRE", start(), "李娜")
    system, user = welcome_messages(facts, "你是入职助手。", WELCOME_RULES)
    assert system == {"role": "system", "content": "你是入职助手。\n\n" + WELCOME_RULES}
    assert user == {
        "role": "user",
        "content": f'{{"name": "张伟", "department": "研发", "role": "SRE", "start_date": "{start()}", "manager": "李娜"}}',
    }
    assert "zhang.wei" not in user["content"]
    assert welcome_messages(facts, "  ", WELCOME_RULES)[0]["content"] == WELCOME_RULES
    for word in ("链接", "网址", "系统", "任务", "links", "tasks"):
        assert word in WELCOME_RULES


# ---- the connector from config ---------------------------------------------------------------------


def test_the_file_source_is_the_export_file(tmp_path):
    hr = make_cfg(tmp_path).hr
    connector = connector_for(hr, {"ERNIE_OPS_HR_TOKEN": "ignored"})
    assert isinstance(connector, ExportFileConnector) and connector.path == tmp_path / "hr.csv"


def test_the_scim_source_reads_its_token_from_the_environment(tmp_path):
    hr = HRConfig.model_validate(
        {"source": "scim", "url": "https://hr.example.com/scim/v2/", "token_env": "HR_TOKEN", "read_timeout_seconds": 4.5}
    )
    connector = connector_for(hr, {"HR_TOKEN": " s3cret\n"})
    try:
        assert isinstance(connector, ScimConnector) and connector.base_url == "https://hr.example.com/scim/v2"
        assert connector._client.headers["Authorization"] == "Bearer s3cret"
        assert connector._client.timeout.read == 4.5 and connector._client.timeout.connect == hr.connect_timeout_seconds
    finally:
        connector.close()
    assert config_problem(hr, {"HR_TOKEN": "x"}) is None


@pytest.mark.parametrize("env", [{}, {"HR_TOKEN": "  "}], ids=["unset", "blank"])
def test_a_scim_source_without_its_token_keeps_the_app_up_and_every_lookup_says_what_to_fix(tmp_path, env):
    hr = HRConfig.model_validate({"source": "scim", "url": "https://hr.example.com/scim/v2", "token_env": "HR_TOKEN"})
    connector = connector_for(hr, env)  # no exception: the chat's other scenarios stay up
    assert isinstance(connector, UnconfiguredConnector)
    problem = config_problem(hr, env)
    assert "HR_TOKEN" in problem and ENV_FILE in problem
    cfg = make_cfg(tmp_path)
    writer = Writer()
    h = Onboarding(cfg, finder(connector, hr.lookup), PushLog(cfg.push_log), writer)
    with pytest.raises(HRError) as err:
        run(h.open("zhang.wei"))
    assert err.value.kind == "unauthorized" and err.value.detail == problem
    assert writer.calls == [] and rows_in_log(tmp_path) == []


def test_finder_refuses_an_unknown_lookup(tmp_path):
    with pytest.raises(ValueError, match="userName or employeeNumber"):
        finder(ExportFileConnector(tmp_path / "hr.csv"), "mail")


# ---- the card -------------------------------------------------------------------------------------------


def _stored(tmp_path: Path) -> list[Item]:
    write_csv(tmp_path, zhang())
    h = helper(tmp_path)
    items = run(h.open("zhang.wei")).items
    run(h.confirm("zhang.wei", items[1].item_id))
    return PushLog(tmp_path / "push.sqlite").items("zhang.wei")


def test_cards_for_welcome_task_and_guide(tmp_path):
    items = _stored(tmp_path)
    welcome, task, guide = items[0], items[1], next(i for i in items if i.kind == "guide")
    assert card(welcome) == {
        "item_id": "welcome", "kind": "welcome", "title": "欢迎 Welcome", "body": WELCOME, "url": None,
        "confirmed": False, "confirmed_at": None,
    }  # fmt: skip
    assert card(task) == {
        "item_id": task.item_id, "kind": "task", "title": "首周任务 First-week task", "body": "领取电脑并登录企业邮箱", "url": None,
        "confirmed": True, "confirmed_at": task.confirmed_at,
    }  # fmt: skip
    assert task.confirmed_at is not None
    assert card(guide) == {
        "item_id": guide.item_id, "kind": "guide", "title": "企业邮箱", "body": "用工号和初始密码登录", "url": "https://mail.example.com",
        "confirmed": False, "confirmed_at": None,
    }  # fmt: skip


def test_a_guide_with_a_multi_line_how_keeps_every_line_in_the_body():
    item = Item("e", "guide-1", "guide", "VPN\n安装客户端\n用工号登录\nhttps://wiki.example.com/vpn", "t", None)
    assert (card(item)["title"], card(item)["body"], card(item)["url"]) == ("VPN", "安装客户端\n用工号登录", "https://wiki.example.com/vpn")


def test_a_guide_not_in_the_stored_shape_is_shown_whole():
    item = Item("e", "guide-1", "guide", "只有一行", "t", None)
    assert (card(item)["title"], card(item)["body"], card(item)["url"]) == (service.GUIDE_TITLE_FALLBACK, "只有一行", None)
