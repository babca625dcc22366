"""The session state machine (idle / collecting_info / generating) and the scenario flows on it."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.chat.config import ScenarioConfig
from ernie_ops.chat.flow import Ask, Busy, Flow, Generate, extract
from ernie_ops.chat.machine import SESSION, InvalidTransition, Machine, Spec
from tests.harness.dates import days_from_today

SCENARIOS = {s.name.split()[-1]: s for s in config.parse("").chat.effective_scenarios()}
DATE = r"\d{4}\s*[-/.年]\s*\d{1,2}\s*[-/.月]\s*\d{1,2}\s*日?"
# Field-collecting scenarios as an operator configures them (the built-in Marketing and Onboarding are tools now).
FIELDS = {
    "Marketing": ScenarioConfig.model_validate({
        "name": "文案 fields", "system_prompt": "copywriter",
        "fields": [
            {"name": "product", "label": "产品 product", "aliases": ["产品", "商品", "product"]},
            {"name": "selling_points", "label": "核心卖点 selling points", "aliases": ["卖点", "核心卖点", "selling points"]},
            {"name": "audience", "label": "目标人群 audience", "aliases": ["人群", "目标人群", "audience"]},
        ],
        "prompt_template": "请为【{product}】撰写3条朋友圈文案，突出【{selling_points}】，面向【{audience}】，每条不超过60字。{request}",
    }),
    "Onboarding": ScenarioConfig.model_validate({
        "name": "入职 fields", "system_prompt": "onboarding",
        "fields": [
            {"name": "department", "label": "部门 department", "aliases": ["部门", "department"]},
            {"name": "role", "label": "岗位 role", "aliases": ["岗位", "职位", "role"]},
            {"name": "start_date", "label": "入职日期 start date", "aliases": ["入职日期", "日期", "start date"], "pattern": DATE},
        ],
        "prompt_template": "新员工：部门 {department}，岗位 {role}，入职日期 {start_date}。{request}",
    }),
}  # fmt: skip


def test_spec_lists_the_articles_three_states():
    assert SESSION.states == {"idle", "collecting_info", "generating"}
    assert SESSION.events("generating") == ["done", "failed", "stopped"]


def test_machine_moves_only_along_listed_transitions():
    m = Machine()
    assert m.fire("ask") == "collecting_info" and m.fire("ask") == "collecting_info"
    assert m.fire("generate") == "generating"
    with pytest.raises(InvalidTransition) as info:
        m.fire("generate")  # a second message while generating
    assert "event 'generate' is not allowed in state 'generating' (allowed: done, failed, stopped)" in str(info.value)
    assert m.state == "generating"  # a refused event changes nothing
    assert m.fire("stopped") == "idle"
    assert m.path == [("idle", "ask", "collecting_info"), ("collecting_info", "ask", "collecting_info"),
                      ("collecting_info", "generate", "generating"), ("generating", "stopped", "idle")]  # fmt: skip


def test_wildcard_and_custom_specs():
    spec = Spec(initial="a", transitions={("a", "go"): "b", ("*", "home"): "a"})
    m = Machine(spec)
    assert spec.states == {"a", "b"}
    assert m.fire("go") == "b" and m.fire("home") == "a"
    with pytest.raises(InvalidTransition):
        Machine(spec).fire("fly")


def test_free_chat_generates_at_once_and_returns_to_idle():
    flow = Flow(SCENARIOS["General"])
    step = flow.on_user_message("你好")
    assert isinstance(step, Generate) and step.user == "你好" and flow.state == "generating"
    assert step.system == SCENARIOS["General"].system_prompt
    assert isinstance(flow.on_user_message("again?"), Busy) and flow.state == "generating"
    for outcome in ("done", "failed", "stopped"):
        flow.finished(outcome)
        assert flow.state == "idle"
        assert isinstance(flow.on_user_message("next"), Generate)
    flow.finished("done")


def test_support_needs_real_values_not_the_words():
    """A keyword check `"电话" in text and "地址" in text` accepts a message that only names them."""
    article_accepts = "请问电话和地址要怎么填？"
    assert "电话" in article_accepts and "地址" in article_accepts
    flow = Flow(SCENARIOS["Support"])
    step = flow.on_user_message(article_accepts)
    assert isinstance(step, Ask) and flow.state == "collecting_info" and flow.values == {}
    assert "联系电话 phone" in step.text and "地址 address" in step.text
    step = flow.on_user_message("电话：123")  # labelled, but not a phone number
    assert isinstance(step, Ask) and "「123」不像是有效的电话" in step.text and "phone" not in flow.values
    step = flow.on_user_message("手机 13800138000")  # unlabelled: found by the pattern
    assert isinstance(step, Ask) and flow.values == {"phone": "13800138000"} and "联系电话" not in step.text
    step = flow.on_user_message("北京市海淀区中关村大街1号")  # the answer to a one-field question needs no label
    assert isinstance(step, Generate) and flow.state == "generating"
    assert step.user.startswith("客户的问题：请问电话和地址要怎么填？\n联系电话：13800138000\n地址：北京市海淀区中关村大街1号")
    assert "- 地址 address: 北京市海淀区中关村大街1号" in step.system
    flow.finished("done")
    follow = flow.on_user_message("还要多久？")  # the template is sent once; the facts stay in the system prompt
    assert isinstance(follow, Generate) and follow.user == "还要多久？" and "13800138000" in follow.system


def test_marketing_fields_in_one_message_go_straight_to_generating():
    flow = Flow(FIELDS["Marketing"])
    step = flow.on_user_message("产品：降噪耳机，卖点：轻薄，续航30小时；目标人群: 通勤白领")
    assert isinstance(step, Generate)
    assert flow.values == {"product": "降噪耳机", "selling_points": "轻薄，续航30小时", "audience": "通勤白领"}
    assert step.user == "请为【降噪耳机】撰写3条朋友圈文案，突出【轻薄，续航30小时】，面向【通勤白领】，每条不超过60字。"


def test_a_source_field_scenario_takes_a_pasted_document_whole():
    pasted = ScenarioConfig.model_validate(
        {
            "name": "Pasted",
            "system_prompt": "Answer only from the user's document.",
            "fields": [{"name": "document", "label": "文档原文 document text", "aliases": ["文档", "原文", "document"]}],
            "prompt_template": "根据上面的文档回答 / Answer from the document above: {request}",
            "source_field": "document",
        }
    )
    flow = Flow(pasted)
    assert isinstance(flow.on_user_message("切换怎么做？"), Ask)
    doc = "Cutover:\n1. start\n2. gate\n3. switch."
    step = flow.on_user_message(doc)
    assert isinstance(step, Generate) and flow.values["document"] == doc
    assert doc in step.system and step.user.endswith("切换怎么做？")
    assert SCENARIOS["Docs"].retrieval and not SCENARIOS["Docs"].fields  # the built-in Docs scenario retrieves instead


def test_onboarding_date_pattern_and_labels_in_english():
    flow = Flow(FIELDS["Onboarding"])
    step = flow.on_user_message("department: Platform, role: SRE")
    assert isinstance(step, Ask) and flow.values == {"department": "Platform", "role": "SRE"}
    assert isinstance(flow.on_user_message("next monday"), Ask)  # not a date
    start = days_from_today(7)
    step = flow.on_user_message(start)
    assert isinstance(step, Generate) and f"入职日期 {start}" in step.user


def test_extract_keeps_unrecognised_text_as_the_request():
    fields = SCENARIOS["Support"].fields
    got = extract("快递丢了 电话: 13800138000 地址：上海市浦东新区 世纪大道100号", fields)
    assert got.values == {"phone": "13800138000", "address": "上海市浦东新区 世纪大道100号"}
    assert got.rest == "快递丢了"


def test_a_resumed_support_thread_has_the_phone_it_was_given_and_asks_for_the_address_only():
    """The thread's user messages replayed (no model): the phone stays collected, the request too, and the next
    answer is the address; a thread whose reply was generated is idle with both fields, its template sent."""
    flow = Flow(SCENARIOS["Support"])
    flow.replay(["我的快递三天了还没到", "13800138000"])
    assert flow.state == "collecting_info" and flow.values == {"phone": "13800138000"}
    assert [f.name for f in flow.missing()] == ["address"]
    step = flow.on_user_message("北京市海淀区中关村大街1号")
    assert isinstance(step, Generate)
    assert step.user.startswith("客户的问题：我的快递三天了还没到\n联系电话：13800138000\n地址：北京市海淀区中关村大街1号\n"), step.user
    done = Flow(SCENARIOS["Support"])
    done.replay(["我的快递三天了还没到。电话：13800138000", "北京市海淀区中关村大街1号", "还要多久？"])
    assert done.state == "idle" and done.values == {"phone": "13800138000", "address": "北京市海淀区中关村大街1号"}
    follow = done.on_user_message("能退货吗？")  # the template was sent before the resume: not again
    assert isinstance(follow, Generate) and follow.user == "能退货吗？" and "北京市海淀区中关村大街1号" in follow.system
