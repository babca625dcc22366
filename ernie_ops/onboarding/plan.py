"""The onboarding plan for one new employee: the welcome (written by the model later), the first-week
tasks and the system guides, from templates per department and role in config.

Templates (a config-shaped dict, validated with pydantic; every problem reported at once as a ConfigError):

    default:     {tasks: [TEXT, ...], guides: [{name: NAME, url: http(s) URL, how: TEXT}, ...]}
    departments:
      研发:       {tasks: [...], guides: [...], roles: {SRE: {tasks: [...], guides: [...]}}}

Merged default < department < role: tasks are concatenated in that order (a text already listed is not
repeated); guides are keyed by name, so a department's or role's guide of the same name replaces the
earlier one in place, and new names are appended. A department or role without templates gets the levels
above it (an unknown department: the default only).

Each item has a stable item_id: `<kind>-` + the first 16 hex digits of sha256 over the kind and the
template text (a guide's name, url and how), so the same template gives the same id in every session and
process, and a changed template gives a new item while the items already pushed stay as they were (the push
log, pushlog.py, never rewrites them). The welcome is one item per employee, item_id `welcome`.

The model only personalises wording. `build_plan` produces the facts (name, department, role, start date,
manager) and the exact tasks and systems/links; the welcome item is marked `needs_model=True` with
`content=None` and its facts, and the chat layer asks the model for its text ONLY if the push log does not
hold the employee's welcome yet (`to_push`). The chat layer must not let the model add, drop or edit
tasks or guides, nor put a link in the welcome: task and guide items are pushed with the content given
here, and `foreign_links` lists any URL in the model's text that is not one of the plan's guides (the
chat layer then drops the text and uses `fallback_welcome`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ernie_ops.errors import ErnieOpsError
from ernie_ops.onboarding.pushlog import NewItem

WELCOME_ID = "welcome"


class PlanError(ErnieOpsError):
    """The plan cannot be built for these facts: one sentence saying what is missing."""


# ---- templates -----------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Guide(_Strict):
    name: str = Field(min_length=1)
    url: str
    how: str = Field(min_length=1)

    @field_validator("name", "how")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank; write the text")
        return value.strip()

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
            raise ValueError("must be an http:// or https:// address with a host, e.g. https://wiki.example.com/vpn")
        return value


def _task_texts(tasks: list[str]) -> list[str]:
    out = []
    for i, task in enumerate(tasks):
        if not task.strip():
            raise ValueError(f"task {i + 1} is blank; write the task or remove it")
        out.append(task.strip())
    dups = sorted({t for t in out if out.count(t) > 1})
    if dups:
        raise ValueError(f"lists {', '.join(repr(t) for t in dups)} more than once; keep one")
    return out


def _unique_guides(guides: list[Guide]) -> list[Guide]:
    names = [g.name for g in guides]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"has more than one guide named {', '.join(repr(n) for n in dups)}; keep one")
    return guides


class Templates(_Strict):
    tasks: list[str] = []
    guides: list[Guide] = []

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, value: list[str]) -> list[str]:
        return _task_texts(value)

    @field_validator("guides")
    @classmethod
    def _guides(cls, value: list[Guide]) -> list[Guide]:
        return _unique_guides(value)


class DepartmentTemplates(Templates):
    roles: dict[str, Templates] = {}


class PlanTemplates(_Strict):
    default: Templates = Templates()
    departments: dict[str, DepartmentTemplates] = {}


# ---- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What the welcome may say: from the HR record, checked by the connector (item 5)."""

    employee: str
    name: str
    department: str
    role: str
    start_date: date
    manager: str | None = None

    def as_prompt_dict(self) -> dict[str, str]:
        """The facts as the model is given them (nothing else about the employee)."""
        out = {"name": self.name, "department": self.department, "role": self.role, "start_date": self.start_date.isoformat()}
        if self.manager:
            out["manager"] = self.manager
        return out


@dataclass(frozen=True)
class PlanItem:
    item_id: str
    kind: str  # welcome | task | guide
    content: str | None  # None only for the welcome, whose text the model writes
    needs_model: bool = False
    facts: Facts | None = None  # the welcome's
    guide: Guide | None = None  # a guide's name, url and how, exactly as in the templates

    def to_new_item(self, text: str | None = None) -> NewItem:
        """What the push log records: the template content, or for the welcome the text written for it."""
        if self.needs_model:
            if text is None or not text.strip():
                raise PlanError("the welcome message has no text yet; write it (model or fallback_welcome) before pushing it")
            return NewItem(self.item_id, self.kind, text.strip())
        if text is not None:
            raise PlanError(f"the {self.kind} {self.item_id} is pushed with its template text; the model may not rewrite it")
        assert self.content is not None
        return NewItem(self.item_id, self.kind, self.content)


@dataclass(frozen=True)
class Plan:
    facts: Facts
    items: tuple[PlanItem, ...]  # the welcome first, then the tasks, then the guides

    @property
    def welcome(self) -> PlanItem:
        return self.items[0]

    @property
    def links(self) -> tuple[str, ...]:
        return tuple(i.guide.url for i in self.items if i.guide is not None)


def item_id(kind: str, text: str) -> str:
    """A stable id from the kind and the template text (same text, same id, in every process)."""
    return f"{kind}-" + hashlib.sha256(f"{kind}\x00{text}".encode()).hexdigest()[:16]


def guide_text(guide: Guide) -> str:
    return f"{guide.name}\n{guide.how}\n{guide.url}"


def _guide_id(guide: Guide) -> str:
    return item_id("guide", json.dumps([guide.name, guide.url, guide.how], ensure_ascii=False))


def merged(templates: PlanTemplates, department: str, role: str) -> Templates:
    """default < department < role (see the module docstring)."""
    levels: list[Templates] = [templates.default]
    dept = templates.departments.get(department)
    if dept is not None:
        levels.append(dept)
        if role in dept.roles:
            levels.append(dept.roles[role])
    tasks: list[str] = []
    guides: dict[str, Guide] = {}
    for level in levels:
        tasks += [t for t in level.tasks if t not in tasks]
        for g in level.guides:
            guides[g.name] = g  # same name: replaced in place (dict keeps the first position)
    return Templates(tasks=tasks, guides=list(guides.values()))


def build_plan(facts: Facts, templates: PlanTemplates) -> Plan:
    """The employee's plan: the welcome (needs_model), the merged tasks and guides, each with its item_id."""
    for field in ("employee", "name", "department"):
        value = getattr(facts, field)
        if not isinstance(value, str) or not value.strip():
            raise PlanError(f"the HR record for {facts.employee!r} has no {field}; ask HR to fill it in, then try again")
    if not isinstance(facts.start_date, date):
        raise PlanError(f"the HR record for {facts.employee!r} has no usable start date ({facts.start_date!r}); ask HR to fix it")
    t = merged(templates, facts.department, facts.role)
    items = [PlanItem(WELCOME_ID, "welcome", None, needs_model=True, facts=facts)]
    items += [PlanItem(item_id("task", task), "task", task) for task in t.tasks]
    items += [PlanItem(_guide_id(g), "guide", guide_text(g), guide=g) for g in t.guides]
    return Plan(facts, tuple(items))


def to_push(plan: Plan, pushed_ids: Iterable[str]) -> list[PlanItem]:
    """The plan's items not in the push log yet (the welcome among them only if it was never pushed:
    then, and only then, the model is asked to write it)."""
    done = set(pushed_ids)
    return [i for i in plan.items if i.item_id not in done]


_URL = re.compile(r"""(?:https?://|www\.)[^\s<>"'）)\]】，。、]+""", re.IGNORECASE)


def foreign_links(text: str, plan: Plan) -> list[str]:
    """URLs in the model's text that are not one of the plan's guide links (the model must not invent systems)."""
    allowed = {u.rstrip("/") for u in plan.links}
    return [u for u in _URL.findall(text) if u.rstrip("/.") not in allowed]


def zh_date(day: date) -> str:
    """A date as the chat writes it in Chinese: 2026年12月5日."""
    return f"{day.year}年{day.month}月{day.day}日"


def fallback_welcome(facts: Facts) -> str:
    """A welcome from the facts alone, for when the model is down or its text is refused. A field the
    record leaves empty (department, title, manager) drops its clause: it never reads "你的岗位是，"."""
    department, role, manager = (v.strip() if isinstance(v, str) else "" for v in (facts.department, facts.role, facts.manager))
    text = f"欢迎加入{department}，{facts.name}！" if department else f"欢迎你，{facts.name}！"
    start = zh_date(facts.start_date)
    text += f"你的岗位是{role}，入职日期是{start}。" if role else f"你的入职日期是{start}。"
    if manager:
        text += f"你的直属上级是{manager}。"
    return text + "下面是你第一周的任务和需要用到的系统指南，看完请点「确认」。"
