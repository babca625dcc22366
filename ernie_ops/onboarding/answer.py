"""Typed questions in the onboarding chat: answered with the employee's HR facts and their plan (each item
with its 已确认 state) in the system prompt, so "我还有哪些任务没完成？" gets their own plan, not free chat.

`question_prompt` is pure: the rules (answer only from the facts and the plan; never invent a task, system,
link, date or number; say who to ask when the plan does not answer), the facts, the plan. It replaces
the scenario's persona for these turns: that persona is the welcome writer's ("mention no systems, links
or tasks"), which would forbid the very answer wanted here.

The routing of a typed message through the chat's Conversation is the chat side's: `chat/onboarding_answer.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ernie_ops.onboarding.plan import Facts, Plan, zh_date
from ernie_ops.onboarding.pushlog import Item
from ernie_ops.onboarding.window import Window

UNAVAILABLE = "入职助手暂时无法使用，请稍后再试或联系管理员。 / The onboarding helper is not available now; try later or ask the admin."

QUESTION_RULES = (
    "你是公司的新员工入职助手，语气友好、简洁。请只根据下面的【人事记录】和【入职计划】回答新员工的问题。"
    "计划中的任务和系统指引是全部内容：不要编造、添加、删除或修改任何任务、系统、网址、日期或数字；"
    "计划里没有答案时，直接说明，并建议询问{who}。\n"
    "You are the onboarding assistant: warm and brief. Answer only from the HR record and the onboarding plan below. "
    "The plan's tasks and system guides are all there is: never invent, add, drop or change a task, system, link, "
    "date or number; when the plan does not answer, say so and suggest asking {who_en}."
)


def _state(item_confirmed: bool) -> str:
    return "已确认 confirmed" if item_confirmed else "未确认 not yet confirmed"


def question_prompt(facts: Facts, plan: Plan, stored: Sequence[Item], win: Window) -> str:
    """The system prompt for a typed question: the rules, the record's facts, and the plan's tasks and guides
    as the employee sees them (the stored text, 已确认 or not; a plan item not pushed yet: not confirmed)."""
    by_id = {i.item_id: i for i in stored}
    who = f"直属上级{facts.manager}或人事部门" if facts.manager else "人事部门"
    who_en = f"their manager {facts.manager} or HR" if facts.manager else "HR"
    record = [f"- 姓名 name: {facts.name}", f"- 部门 department: {facts.department}"]
    if facts.role.strip():
        record.append(f"- 岗位 role: {facts.role}")
    record.append(f"- 入职日期 start date: {zh_date(facts.start_date)} ({facts.start_date.isoformat()})")
    if facts.manager:
        record.append(f"- 直属上级 manager: {facts.manager}")
    record.append(f"- 入职引导截止 onboarding ends: {zh_date(win.last_day)} ({win.last_day.isoformat()})")
    tasks, guides = [], []
    for p in plan.items:
        if p.kind == "welcome":
            continue
        item = by_id.get(p.item_id)
        text = item.content if item is not None else (p.content or "")
        confirmed = item is not None and item.confirmed
        if p.kind == "task":
            tasks.append(f"{len(tasks) + 1}. [{_state(confirmed)}] {text}")
        else:
            name, *rest = text.split("\n")  # plan.guide_text: name, how, url
            guides.append(f"- [{_state(confirmed)}] {name}: {' '.join(line.strip() for line in rest if line.strip())}")
    done = sum(1 for p in plan.items if p.kind != "welcome" and (i := by_id.get(p.item_id)) is not None and i.confirmed)
    total = len(tasks) + len(guides)
    parts = [
        QUESTION_RULES.format(who=who, who_en=who_en),
        "【人事记录 HR record】\n" + "\n".join(record),
        f"【入职计划 onboarding plan】已确认 {done}/{total} confirmed\n首周任务 first-week tasks:\n"
        + ("\n".join(tasks) or "（无 none）")
        + "\n系统指引 system guides:\n"
        + ("\n".join(guides) or "（无 none）"),
    ]
    return "\n\n".join(parts)
