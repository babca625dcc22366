"""Typed questions in the onboarding profile (ernie_ops.onboarding.answer): the system prompt holds the
employee's HR facts and their plan with each item's 已确认 state, and the chat's typed message is routed
through it. The REAL service on a CSV export and a push log on tmp_path; the routing drives the REAL
Conversation (the chat app's code path) with a recording Sink and a REAL GatewayClient pointed at a port
that refuses connections: the request is built and fitted (the /tokenize estimate), then the gateway fails,
and the Outcome holds the exact messages that were sent."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ernie_ops import config
from ernie_ops.chat import history
from ernie_ops.chat.conversation import Conversation
from ernie_ops.chat.onboarding_answer import answer
from ernie_ops.client.gateway import GatewayClient, Timeouts
from ernie_ops.hr.model import HRError
from ernie_ops.onboarding.answer import QUESTION_RULES, UNAVAILABLE, question_prompt
from ernie_ops.onboarding.plan import Facts, PlanTemplates, build_plan, zh_date
from ernie_ops.onboarding.pushlog import PushLog
from ernie_ops.onboarding.service import Onboarding, connector_for, finder
from ernie_ops.onboarding.window import OnboardingOver, window
from tests.harness.dates import day
from tests.harness.onboarding import TEMPLATES, Writer, make_cfg, write_csv
from tests.harness.recording_sink import Recorder


def today():
    return day(0)


def start():  # day 3 of the first week
    return day(-2)


def facts():
    return Facts("zhang.wei", "张伟", "研发", "SRE", start(), "李娜")


ONBOARDING = next(s for s in config.parse("").chat.effective_scenarios() if s.tool == "onboarding")


def run(coro):
    return asyncio.run(coro)


def helper(tmp_path, today=None) -> Onboarding:
    cfg = make_cfg(tmp_path)
    return Onboarding(
        cfg,
        finder(connector_for(cfg.hr, {}), "userName"),
        PushLog(cfg.push_log),
        Writer(),
        today=lambda: day(0) if today is None else today,
    )


# ---- the prompt (pure) ----------------------------------------------------------------------------------


def test_the_prompt_holds_the_rules_the_facts_and_the_plan_with_what_is_confirmed(tmp_path):
    plan = build_plan(facts(), PlanTemplates.model_validate(TEMPLATES))
    with PushLog(tmp_path / "push.sqlite") as log:
        stored = log.push("zhang.wei", [p.to_new_item("欢迎！" if p.needs_model else None) for p in plan.items])
        log.confirm("zhang.wei", stored[2].item_id)  # the second task
        stored = log.items("zhang.wei")
    prompt = question_prompt(facts(), plan, stored, window(start(), day(0), 30))
    assert prompt.startswith(QUESTION_RULES.format(who="直属上级李娜或人事部门", who_en="their manager 李娜 or HR"))
    for rule in ("不要编造、添加、删除或修改任何任务", "never invent, add, drop or change a task"):
        assert rule in prompt
    assert f"- 入职日期 start date: {zh_date(start())} ({start().isoformat()})" in prompt
    assert "- 部门 department: 研发\n- 岗位 role: SRE" in prompt and "- 直属上级 manager: 李娜" in prompt
    assert f"- 入职引导截止 onboarding ends: {zh_date(day(28))}" in prompt
    assert "已确认 1/6 confirmed" in prompt
    assert (
        "1. [未确认 not yet confirmed] 领取电脑并登录企业邮箱\n"
        "2. [已确认 confirmed] 完成信息安全培训\n"
        "3. [未确认 not yet confirmed] 开通代码仓库权限\n"
        "4. [未确认 not yet confirmed] 加入值班群\n"
    ) in prompt
    assert "- [未确认 not yet confirmed] 企业邮箱: 用工号和初始密码登录 https://mail.example.com" in prompt
    assert "- [未确认 not yet confirmed] 监控平台: 用 SSO 登录 https://grafana.example.com" in prompt
    assert "欢迎！" not in prompt  # the welcome is not a task


def test_an_item_not_pushed_yet_is_listed_unconfirmed_and_empty_fields_are_left_out():
    facts = Facts("li.lei", "李雷", "市场", "", start(), None)
    plan = build_plan(facts, PlanTemplates.model_validate(TEMPLATES))
    prompt = question_prompt(facts, plan, [], window(start(), day(0), 30))
    assert "岗位" not in prompt and "直属上级" not in prompt and "建议询问人事部门" in prompt
    assert "3. [未确认 not yet confirmed] 熟悉品牌手册" in prompt and "已确认 0/4 confirmed" in prompt


# ---- the service: the login's facts and the push log as it is now ------------------------------------------


def test_the_service_prompt_follows_the_confirmations_and_the_window(tmp_path):
    write_csv(tmp_path, f"zhang.wei,E1001,张伟,研发,SRE,李娜,{start()}", f"old,E9,老王,研发,SRE,李娜,{day(-31)}")
    h = helper(tmp_path)
    items = run(h.open("zhang.wei")).items
    assert "已确认 0/6" in run(h.question_prompt("zhang.wei"))
    run(h.confirm("zhang.wei", items[1].item_id))
    assert "已确认 1/6" in run(h.question_prompt("zhang.wei"))
    assert "1. [已确认 confirmed] 领取电脑并登录企业邮箱" in run(helper(tmp_path).question_prompt("zhang.wei"))  # a restart
    with pytest.raises(OnboardingOver):
        run(h.question_prompt("old"))


# ---- the routing: a typed question goes to the model with that prompt ----------------------------------------


def conversation(url: str) -> Conversation:
    chat = config.parse("").chat
    client = GatewayClient(url, "m", Timeouts(connect=2, read=2, reply=5))
    return Conversation(
        ONBOARDING, chat, history.Budget(4096, 256, 16), client, history.TokenizeCounter(client.http, url, "m"), user="zhang.wei"
    )


def test_a_typed_question_is_sent_with_the_facts_and_the_plan_as_the_system_prompt(tmp_path):
    write_csv(tmp_path, f"zhang.wei,E1001,张伟,研发,SRE,李娜,{start()}")
    h = helper(tmp_path)
    run(h.open("zhang.wei"))
    sink = Recorder()
    with socket.socket() as s:  # bound, not listening: the gateway refuses (a real failure, after the request is built)
        s.bind(("127.0.0.1", 0))
        conv = conversation(f"http://127.0.0.1:{s.getsockname()[1]}")
        out = run(answer(h, "zhang.wei", "我还有哪些任务没完成？", conv, sink))
    system, user = out.fitted.messages
    assert system == {"role": "system", "content": run(h.question_prompt("zhang.wei"))}
    assert user == {"role": "user", "content": "我还有哪些任务没完成？"}
    assert ONBOARDING.system_prompt not in system["content"]  # the welcome persona ("mention no tasks") is not used
    assert out.kind == "failed" and sink.failed  # the gateway's friendly sentence


def test_after_the_window_a_typed_question_gets_the_polite_sentence_and_no_model_call(tmp_path):
    write_csv(tmp_path, f"zhang.wei,E1001,张伟,研发,SRE,李娜,{day(-31)}")
    sink = Recorder()
    out = run(answer(helper(tmp_path), "zhang.wei", "我的任务是什么？", conversation("http://127.0.0.1:9"), sink))
    assert out.kind == "unanswered" and out.fitted is None
    assert len(sink.said) == 1 and "入职引导已于" in sink.said[0] and "李娜" in sink.said[0] and not sink.failed


def test_an_hr_failure_or_no_helper_is_one_sentence_and_no_model_call(tmp_path):
    sink = Recorder()
    out = run(answer(helper(tmp_path), "zhang.wei", "你好", conversation("http://127.0.0.1:9"), sink))  # no export file
    assert out.kind == "failed" and out.fitted is None and sink.failed == [HRError("down", "-").message]
    sink = Recorder()
    run(answer(None, "zhang.wei", "你好", conversation("http://127.0.0.1:9"), sink))
    assert sink.failed == [UNAVAILABLE]
