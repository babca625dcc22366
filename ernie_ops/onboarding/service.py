"""The onboarding helper's service layer: what the chat app calls, without Chainlit.

    connector = connector_for(cfg.hr, os.environ)          # at app start; never raises for a missing token
    helper = Onboarding(cfg, finder(connector, cfg.hr.lookup), PushLog(cfg.push_log),
                        welcome_writer(client, scenario.system_prompt, cfg.welcome_max_tokens))
    opened = await helper.open(login)                      # HRError / PlanError / PushLogError: nothing pushed
    cards = [card(item) for item in opened.items]          # the OnboardingItem element's props
    item = await helper.confirm(login, item_id)            # the 确认 button; only the login's own items

- `open` looks the login up in HR (a blocking call, run in a thread), builds the plan from the templates,
  reads the push log, asks the model for the welcome ONLY if the log does not hold it yet, and pushes the
  missing items in one transaction. Every error (HRError with its `.message` for the chat, PlanError,
  PushLogError) is raised before anything is pushed.
- The welcome the model writes is refused (and `fallback_welcome` pushed instead, `fallback_welcome_used`
  set, a warning logged with the reason) when it holds a link that is not one of the plan's guides, is
  empty, is absurdly long, or says what the record does not (welcome_check: a department, role, manager
  or date that is not the record's, an invented number or amount); a gateway failure (ChatError) falls
  back the same way: the plan is pushed anyway.
- The helper serves an employee from before the start date through `active_days` after it (window.py);
  after that `open` and `confirm` raise OnboardingOver, whose `.message` is the polite sentence to show.
- The employee key in the push log is the HR record's user_name (stable), derived from the login on the
  server, never from anything the browser sends; `confirm` derives it exactly as `open` does (the key an
  `open` of this login found, kept in memory, else the same HR lookup).
- A SCIM source whose token variable is unset does not stop the app (the other scenarios stay up): its
  connector raises HRError('unauthorized') at each lookup, the detail naming the variable and the file;
  `config_problem` gives the same sentence for a warning at app start.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Protocol

from ernie_ops.client.gateway import ChatError, GatewayClient
from ernie_ops.hr.config import HRConfig
from ernie_ops.hr.export_file import ExportFileConnector
from ernie_ops.hr.model import Employee, HRError
from ernie_ops.hr.scim import ScimConnector
from ernie_ops.onboarding.answer import question_prompt
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import WELCOME_ID, Facts, Plan, PlanTemplates, build_plan, fallback_welcome, foreign_links, to_push
from ernie_ops.onboarding.pushlog import Item, PushLog
from ernie_ops.onboarding.welcome_check import mismatch
from ernie_ops.onboarding.window import OnboardingOver, window

log = logging.getLogger(__name__)

ENV_FILE = "/etc/ernie-ops/chat.env"  # the chat unit's EnvironmentFile (systemd/ernie-chainlit.service)
MAX_WELCOME_CHARS = 1000  # longer is not a welcome (a weak model rambling until max_tokens): refused
WELCOME_TEMPERATURE = 0.7

# What the model is told, whatever the scenario's persona: the facts only, no systems, links or tasks.
WELCOME_RULES = (
    "请根据用户消息中 JSON 给出的事实，为这位新员工写一段简短、温暖的欢迎语（不超过 150 字）。"
    "只使用给出的事实；不要提及任何系统、网址、链接或任务，也不要编造其他信息：任务和系统指引会另外推送。\n"
    "Write a short, warm welcome (under 100 words) for this new employee from the facts in the user's JSON only. "
    "Mention no systems, web addresses, links or tasks and invent nothing: tasks and system guides are sent separately."
)

GUIDE_TITLE_FALLBACK = "系统指引 System guide"
TITLES = {"welcome": "欢迎 Welcome", "task": "首周任务 First-week task"}


class Connector(Protocol):
    """ExportFileConnector, ScimConnector or UnconfiguredConnector."""

    def find(self, *, user_name: str | None = None, employee_number: str | None = None) -> Employee: ...


WriteWelcome = Callable[[Facts, str], Awaitable[str]]


# ---- the HR connector from config ----------------------------------------------------------------


def config_problem(hr: HRConfig, env: Mapping[str, str]) -> str | None:
    """Why the HR source cannot be used as configured (a SCIM token variable unset), or None."""
    if hr.source == "scim" and not (env.get(hr.token_env) or "").strip():
        return (
            f"chat.onboarding.hr.token_env: the environment variable {hr.token_env} is not set; put "
            f"{hr.token_env}=<the SCIM bearer token> in {ENV_FILE} (the chat unit's EnvironmentFile) and restart the chat app"
        )
    return None


class UnconfiguredConnector:
    """Stands in for a SCIM connector that has no token: every lookup is HRError('unauthorized') with the fix."""

    def __init__(self, problem: str):
        self.problem = problem

    def find(self, *, user_name: str | None = None, employee_number: str | None = None) -> Employee:
        raise HRError("unauthorized", self.problem)


def connector_for(hr: HRConfig, env: Mapping[str, str]) -> Connector:
    """The connector the config names: the HR export file, or SCIM with the token from `env` (the EnvironmentFile).
    A missing token does not raise here (the chat stays up for the other scenarios); see UnconfiguredConnector."""
    if hr.source == "file":
        return ExportFileConnector(Path(hr.file))
    problem = config_problem(hr, env)
    if problem is not None:
        log.warning("onboarding: %s", problem)
        return UnconfiguredConnector(problem)
    assert hr.url is not None  # HRConfig requires it for source scim
    return ScimConnector(
        hr.url,
        env[hr.token_env].strip(),
        start_date_attribute=hr.start_date_attribute,
        connect_timeout=hr.connect_timeout_seconds,
        read_timeout=hr.read_timeout_seconds,
    )


def finder(connector: Connector, lookup: str) -> Callable[[str], Employee]:
    """`find(login)`: the login is the HR userName or employeeNumber, as `chat.onboarding.hr.lookup` says."""
    if lookup not in ("userName", "employeeNumber"):
        raise ValueError(f"lookup must be userName or employeeNumber, not {lookup!r}")

    def find(login: str) -> Employee:
        if not isinstance(login, str) or not login.strip():
            raise HRError("not_found", f"the chat login {login!r} is empty; nothing to look up")
        if lookup == "userName":
            return connector.find(user_name=login.strip())
        return connector.find(employee_number=login.strip())

    return find


# ---- the welcome -----------------------------------------------------------------------------------


def welcome_messages(facts: Facts, persona: str, rules: str) -> list[dict]:
    """The request for the welcome: the persona and the rules as the system message, ONLY the facts as the user's."""
    system = f"{persona.strip()}\n\n{rules}" if persona and persona.strip() else rules
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": json.dumps(facts.as_prompt_dict(), ensure_ascii=False)},
    ]


def welcome_writer(client: GatewayClient, system_prompt: str, max_tokens: int, *, temperature: float = WELCOME_TEMPERATURE) -> WriteWelcome:
    """The default `write_welcome`: asks the gateway. `system_prompt` is the scenario's persona; the rules
    (facts only, no links/systems/tasks) come with each call from Onboarding. Raises ChatError on failure."""

    async def write(facts: Facts, rules: str) -> str:
        return await client.complete(welcome_messages(facts, system_prompt, rules), max_tokens, temperature)

    return write


def known_names(templates: PlanTemplates) -> tuple[list[str], list[str]]:
    """The departments and roles the templates name: another one in a welcome is a wrong one."""
    departments = list(templates.departments)
    roles = sorted({role for dept in templates.departments.values() for role in dept.roles})
    return departments, roles


def refusal(text: object, plan: Plan, templates: PlanTemplates | None = None) -> str | None:
    """Why the model's welcome cannot be pushed (None: it can): empty, absurdly long, a link that is not a
    guide's, or anything the record does not say (welcome_check.mismatch: department, role, manager, date,
    an invented number)."""
    if not isinstance(text, str) or not text.strip():
        return "the model's welcome is empty"
    if len(text.strip()) > MAX_WELCOME_CHARS:
        return f"the model's welcome has {len(text.strip())} characters (over {MAX_WELCOME_CHARS})"
    links = foreign_links(text, plan)
    if links:
        return f"the model's welcome holds links that are not the plan's guides: {', '.join(links[:3])}"
    departments, roles = known_names(templates) if templates is not None else ([], [])
    wrong = mismatch(text, plan.facts, departments=departments, roles=roles)
    if wrong:
        return f"the model's welcome {wrong}"
    return None


# ---- the service -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opened:
    """What `open` shows: the employee's items as stored (with their 已确认 state), how many this call pushed,
    and whether the welcome this call pushed is the fallback (the model failed or its text was refused)."""

    facts: Facts
    items: list[Item]
    new: int
    fallback_welcome_used: bool


def facts_from(employee: Employee) -> Facts:
    """The facts the plan and the welcome use; the employee key is the HR user_name (stable)."""
    return Facts(
        employee=employee.user_name,
        name=employee.display_name or employee.user_name,
        department=employee.department,
        role=employee.title,
        start_date=employee.start_date,
        manager=employee.manager or None,
    )


class Onboarding:
    """One per app process, shared by every session (see the module docstring)."""

    def __init__(
        self,
        cfg: OnboardingConfig,
        find: Callable[[str], Employee],
        push_log: PushLog,
        write_welcome: WriteWelcome,
        *,
        today: Callable[[], date] = date.today,
    ):
        self.cfg = cfg
        self._find = find
        self.push_log = push_log
        self._write_welcome = write_welcome
        self._today = today  # tests give the day their relative dates were computed on
        self._facts: dict[str, Facts] = {}  # login -> the facts of this process's last HR lookup for it

    async def _lookup(self, login: str) -> Facts:
        facts = facts_from(await asyncio.to_thread(self._find, login))
        if facts.employee:
            self._facts[login] = facts
        return facts

    def _served(self, facts: Facts) -> Facts:
        """The facts, or OnboardingOver when today is past the employee's window (before the start is served)."""
        win = window(facts.start_date, self._today(), self.cfg.active_days)
        if not win.serves:
            raise OnboardingOver(facts.employee, facts.name, win, facts.manager)
        return facts

    async def _known(self, login: str) -> Facts:
        """The facts `open` found for this login (an HR outage since does not block the 确认 button), else a lookup."""
        return self._served(self._facts.get(login) or await self._lookup(login))

    async def _welcome(self, plan: Plan) -> tuple[str, bool]:
        """The welcome's text and whether it is the fallback."""
        try:
            text = await self._write_welcome(plan.facts, WELCOME_RULES)
        except ChatError as exc:
            reason = f"the gateway failed ({exc})"
        else:
            reason = refusal(text, plan, self.cfg.templates)
            if reason is None:
                return text.strip(), False
        log.warning("onboarding: fallback welcome for %s: %s", plan.facts.employee, reason)
        return fallback_welcome(plan.facts), True

    async def open(self, login: str) -> Opened:
        """Look the login up, push what the log does not hold yet (all or nothing), and return everything stored.
        OnboardingOver (nothing pushed, the model not asked) when the employee's window has passed."""
        facts = self._served(await self._lookup(login))
        plan = build_plan(facts, self.cfg.templates)
        stored = await asyncio.to_thread(self.push_log.items, facts.employee)
        pending = to_push(plan, [i.item_id for i in stored])
        if not pending:
            return Opened(facts, stored, 0, False)
        text, fallback = (None, False)
        if any(p.item_id == WELCOME_ID for p in pending):
            text, fallback = await self._welcome(plan)
        new_items = [p.to_new_item(text if p.needs_model else None) for p in pending]
        items, new = await asyncio.to_thread(self.push_log.push_counted, facts.employee, new_items)
        if fallback:  # another session may have pushed its own welcome first: only ours counts
            fallback = any(i.item_id == WELCOME_ID and i.content == text for i in items)
        return Opened(facts, items, new, fallback)

    async def question_prompt(self, login: str) -> str:
        """The system prompt for the login's typed question: their facts and plan with the 已确认 state as the
        push log holds it now (answer.question_prompt). OnboardingOver outside the window."""
        facts = await self._known(login)
        stored = await asyncio.to_thread(self.push_log.items, facts.employee)
        plan = build_plan(facts, self.cfg.templates)
        return question_prompt(facts, plan, stored, window(facts.start_date, self._today(), self.cfg.active_days))

    async def confirm(self, login: str, item_id: str) -> Item:
        """Mark the login's own item 已确认 (idempotent); another employee's item is refused like an unknown one.
        The key is the one `open` found for this login (an HR outage since does not block the 确认 button);
        a login not opened in this process is looked up the same way. Inside the window only (OnboardingOver)."""
        facts = await self._known(login)
        return await asyncio.to_thread(self.push_log.confirm, facts.employee, item_id)


# ---- the card ----------------------------------------------------------------------------------------


def card(item: Item) -> dict:
    """The props of the OnboardingItem element for one stored item. A guide is stored as plan.guide_text
    (name, how, url on their own lines): its name is the title, its url the link, the lines between the body."""
    title, body, url = TITLES.get(item.kind, item.kind), item.content, None
    if item.kind == "guide":
        lines = item.content.split("\n")
        if len(lines) >= 3 and lines[-1].strip().startswith(("http://", "https://")):
            title, body, url = lines[0].strip(), "\n".join(lines[1:-1]).strip(), lines[-1].strip()
        else:  # not in guide_text's shape (never written by this code): show it whole
            title = GUIDE_TITLE_FALLBACK
    return {
        "item_id": item.item_id,
        "kind": item.kind,
        "title": title,
        "body": body,
        "url": url,
        "confirmed": item.confirmed,
        "confirmed_at": item.confirmed_at,
    }
