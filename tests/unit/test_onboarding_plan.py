"""The onboarding plan (ernie_ops.onboarding.plan): templates validated with every problem at once,
merged default < department < role, stable item ids (a changed template gives a new item), the welcome
left to the model with the facts only, links the model adds caught, and the plan pushed through a real
push log once.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from ernie_ops import config
from ernie_ops.errors import ConfigError
from ernie_ops.onboarding.plan import (
    Facts,
    PlanError,
    PlanTemplates,
    build_plan,
    fallback_welcome,
    foreign_links,
    item_id,
    merged,
    to_push,
)
from ernie_ops.onboarding.pushlog import PushLog
from tests.harness.dates import day

TEMPLATES = {
    "default": {
        "tasks": ["领取电脑并登录企业邮箱", "完成信息安全培训"],
        "guides": [
            {"name": "企业邮箱", "url": "https://mail.example.com", "how": "用工号和初始密码登录，首次登录改密码"},
            {"name": "VPN", "url": "https://wiki.example.com/vpn", "how": "安装客户端，用工号登录"},
        ],
    },
    "departments": {
        "研发": {
            "tasks": ["开通代码仓库权限", "完成信息安全培训"],
            "guides": [{"name": "VPN", "url": "https://wiki.example.com/vpn-dev", "how": "研发网段用开发版客户端"}],
            "roles": {
                "SRE": {
                    "tasks": ["加入值班群"],
                    "guides": [{"name": "监控平台", "url": "https://grafana.example.com", "how": "用 SSO 登录"}],
                }
            },
        },
        "市场": {"tasks": ["熟悉品牌手册"]},
    },
}

START, LATER = day(5), day(33)  # start dates still to come (the plan itself does not compare them with today)
FACTS = Facts("e1001", "王小明", "研发", "SRE", START, "李雷")


def templates(data: dict) -> PlanTemplates:
    return PlanTemplates.model_validate(data)


def _plan(facts=FACTS, data=TEMPLATES):
    return build_plan(facts, templates(data))


# ---- merging -------------------------------------------------------------------------------------


def test_default_department_and_role_are_merged_in_order():
    t = merged(templates(TEMPLATES), "研发", "SRE")
    assert t.tasks == ["领取电脑并登录企业邮箱", "完成信息安全培训", "开通代码仓库权限", "加入值班群"]
    # the department's VPN guide replaces the default's in place; the role's guide is appended
    assert [(g.name, g.url) for g in t.guides] == [
        ("企业邮箱", "https://mail.example.com"),
        ("VPN", "https://wiki.example.com/vpn-dev"),
        ("监控平台", "https://grafana.example.com"),
    ]


def test_an_unknown_role_gets_its_department_and_an_unknown_department_the_default():
    tpl = templates(TEMPLATES)
    assert merged(tpl, "研发", "前端").tasks == ["领取电脑并登录企业邮箱", "完成信息安全培训", "开通代码仓库权限"]
    assert merged(tpl, "财务", "会计").tasks == ["领取电脑并登录企业邮箱", "完成信息安全培训"]
    assert [g.url for g in merged(tpl, "财务", "会计").guides] == ["https://mail.example.com", "https://wiki.example.com/vpn"]
    assert merged(templates({}), "研发", "SRE").tasks == []


def test_the_plan_is_the_welcome_then_tasks_then_guides_exactly_as_templated():
    plan = _plan()
    kinds = [i.kind for i in plan.items]
    assert kinds == ["welcome", "task", "task", "task", "task", "guide", "guide", "guide"]
    welcome = plan.welcome
    assert (welcome.item_id, welcome.content, welcome.needs_model, welcome.facts) == ("welcome", None, True, FACTS)
    assert FACTS.as_prompt_dict() == {"name": "王小明", "department": "研发", "role": "SRE", "start_date": str(START), "manager": "李雷"}
    tasks = [(i.content, i.needs_model, i.facts) for i in plan.items if i.kind == "task"]
    assert tasks == [(t, False, None) for t in ("领取电脑并登录企业邮箱", "完成信息安全培训", "开通代码仓库权限", "加入值班群")]
    guide = plan.items[-1]
    assert guide.content == "监控平台\n用 SSO 登录\nhttps://grafana.example.com"
    assert (guide.guide.name, guide.guide.url, guide.guide.how) == ("监控平台", "https://grafana.example.com", "用 SSO 登录")
    assert plan.links == ("https://mail.example.com", "https://wiki.example.com/vpn-dev", "https://grafana.example.com")
    assert len({i.item_id for i in plan.items}) == len(plan.items)


# ---- stable ids ----------------------------------------------------------------------------------


def test_item_ids_are_stable_across_processes_and_change_with_the_template_text():
    ids = [i.item_id for i in _plan().items]
    code = (
        "import datetime, json, sys; from ernie_ops.onboarding.plan import *; "
        f"f = Facts('e2', 'x', '研发', 'SRE', datetime.date.fromisoformat('{LATER}')); "
        "print(json.dumps([i.item_id for i in build_plan(f, PlanTemplates.model_validate(json.loads(sys.argv[1]))).items]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(TEMPLATES, ensure_ascii=False)], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == ids  # another process, another employee: the same template ids
    assert ids[1] == item_id("task", "领取电脑并登录企业邮箱") and ids[1].startswith("task-") and len(ids[1]) == 5 + 16
    changed = copy.deepcopy(TEMPLATES)
    changed["default"]["tasks"][0] = "领取电脑并登录企业邮箱和 IM"
    changed["departments"]["研发"]["roles"]["SRE"]["guides"][0]["how"] = "用 SSO 登录，选择研发组织"
    new_ids = [i.item_id for i in _plan(data=changed).items]
    assert [a == b for a, b in zip(ids, new_ids, strict=True)] == [True, False, True, True, True, True, True, False]
    assert item_id("task", "VPN")[len("task-") :] != item_id("guide", "VPN")[len("guide-") :]  # the kind is hashed, not only the prefix


def test_a_changed_template_adds_a_new_item_and_keeps_the_pushed_one(tmp_path):
    with PushLog(tmp_path / "onboarding.sqlite") as log:
        plan = _plan()
        first = log.push("e1001", [i.to_new_item("欢迎你，小明！") if i.needs_model else i.to_new_item() for i in plan.items])
        assert [i.item_id for i in to_push(plan, (s.item_id for s in first))] == []  # a reload: the model is not asked again
        changed = copy.deepcopy(TEMPLATES)
        changed["default"]["tasks"][0] = "领取电脑"
        plan2 = _plan(data=changed)
        pending = to_push(plan2, (s.item_id for s in log.items("e1001")))
        assert [(i.kind, i.content) for i in pending] == [("task", "领取电脑")]
        stored = log.push("e1001", [i.to_new_item() for i in pending])
        assert [s.content for s in stored][:2] == ["欢迎你，小明！", "领取电脑并登录企业邮箱"]  # the old one stays as it was
        assert stored[-1].content == "领取电脑" and len(stored) == len(first) + 1


def test_to_new_item_keeps_template_text_and_needs_text_for_the_welcome():
    plan = _plan()
    with pytest.raises(PlanError, match=r"the welcome message has no text yet; write it"):
        plan.welcome.to_new_item()
    with pytest.raises(PlanError, match=r"the welcome message has no text yet"):
        plan.welcome.to_new_item("  ")
    task = plan.items[1]
    with pytest.raises(PlanError, match=rf"the task {task.item_id} is pushed with its template text; the model may not rewrite it"):
        task.to_new_item("模型改写的任务")
    assert task.to_new_item().content == "领取电脑并登录企业邮箱"


# ---- what the model may write --------------------------------------------------------------------


def test_links_the_model_adds_are_caught():
    plan = _plan()
    ok = "欢迎！请先看 https://wiki.example.com/vpn-dev 和 https://grafana.example.com/ 。"
    assert foreign_links(ok, plan) == []
    bad = "欢迎！记得登录 https://hr.example.com/portal，以及www.evil.example 和 http://wiki.example.com/vpn"
    assert foreign_links(bad, plan) == ["https://hr.example.com/portal", "www.evil.example", "http://wiki.example.com/vpn"]


def test_the_fallback_welcome_says_only_the_facts():
    start = f"{START.year}年{START.month}月{START.day}日"
    assert fallback_welcome(FACTS) == (
        f"欢迎加入研发，王小明！你的岗位是SRE，入职日期是{start}。你的直属上级是李雷。"
        "下面是你第一周的任务和需要用到的系统指南，看完请点「确认」。"
    )
    no_manager = Facts("e2", "小李", "市场", "专员", LATER)
    assert "上级" not in fallback_welcome(no_manager)
    assert "manager" not in no_manager.as_prompt_dict()


@pytest.mark.parametrize(
    ("department", "role", "manager", "opening"),
    [
        ("研发", "", "李雷", "欢迎加入研发，王小明！你的入职日期是{start}。你的直属上级是李雷。"),
        ("", "SRE", None, "欢迎你，王小明！你的岗位是SRE，入职日期是{start}。"),
        ("", "  ", "", "欢迎你，王小明！你的入职日期是{start}。"),
    ],
    ids=["no-title", "no-department-no-manager", "nothing-but-the-date"],
)
def test_the_fallback_welcome_drops_the_clause_of_an_empty_field(department, role, manager, opening):
    text = fallback_welcome(Facts("e1", "王小明", department, role, START, manager))
    start = f"{START.year}年{START.month}月{START.day}日"
    assert text == opening.format(start=start) + "下面是你第一周的任务和需要用到的系统指南，看完请点「确认」。"
    assert "是，" not in text and "是。" not in text and "加入，" not in text


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        (Facts("e1", "王", "", "SRE", LATER), r"the HR record for 'e1' has no department; ask HR to fill it in"),
        (Facts("e1", "  ", "研发", "SRE", LATER), r"the HR record for 'e1' has no name"),
        (Facts("e1", "王", "研发", "SRE", str(LATER)), rf"the HR record for 'e1' has no usable start date \('{LATER}'\)"),
    ],
    ids=["no-department", "no-name", "start-date-a-string"],  # not the message: it holds today's date
)
def test_facts_the_plan_cannot_use_are_a_sentence(facts, message):
    with pytest.raises(PlanError, match=message):
        _plan(facts=facts)


# ---- template validation -------------------------------------------------------------------------


def test_every_template_problem_is_reported_at_once_with_its_line():
    """As an operator meets them: the templates are `chat.onboarding.templates` in ernie.yaml, checked with the rest
    of the config (config.py: every problem at once, file:line)."""
    text = """chat:
  onboarding:
    templates:
      default:
        tasks: ["ok", "  "]
        guides: [{name: VPN, url: wiki/vpn, how: x}]
      departments:
        研发:
          task: [typo]
          guides: [{name: A, url: "https://a.example.com"}, {name: A, url: "https://b.example.com", how: y}]
          roles:
            SRE: {tasks: [值班, 值班], guides: not a list}
      extra: 1
"""
    with pytest.raises(ConfigError) as err:
        config.parse(text, "ernie.yaml")
    at = "ernie.yaml:{}: chat.onboarding.templates.".format
    assert [str(p) for p in err.value.problems] == [
        at(5) + "default.tasks = ['ok', '  ']: task 2 is blank; write the task or remove it",
        at(6) + "default.guides[0].url = 'wiki/vpn': must be an http:// or https:// address with a host, e.g. https://wiki.example.com/vpn",
        at(9) + "departments.研发.task = ['typo']: unknown key",
        at(10) + "departments.研发.guides[0].how: required; add it",
        at(12) + "departments.研发.roles.SRE.tasks = ['值班', '值班']: lists '值班' more than once; keep one",
        at(12) + "departments.研发.roles.SRE.guides = 'not a list': Input should be a valid list",
        at(13) + "extra = 1: unknown key",
    ]
    assert str(err.value).startswith("7 problem(s) in the config:\n")


def test_duplicate_guide_names_and_a_non_mapping_are_refused():
    guide = "{name: VPN, url: 'https://a.example.com', how: x}"
    dup = f"chat:\n  onboarding:\n    templates:\n      default:\n        guides: [{guide}, {guide}]\n"
    with pytest.raises(ConfigError, match=r"default\.guides = .*: has more than one guide named 'VPN'; keep one"):
        config.parse(dup)
    with pytest.raises(ConfigError, match=r"chat\.onboarding\.templates = \['a'\]: must be a mapping with default and departments"):
        config.parse("chat:\n  onboarding:\n    templates: [a]\n")
    empty = config.parse("chat:\n  onboarding:\n    templates:\n").chat.onboarding.templates
    assert empty == PlanTemplates()
