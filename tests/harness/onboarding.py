"""The onboarding tests' shared inputs: an HR export CSV written to tmp_path, department/role templates, an
onboarding config over both, and the INJECTED write_welcome (`Writer`) whose text is known in advance.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.onboarding.plan import Facts

HEADER = "user_name,employee_number,display_name,department,title,manager,start_date\n"


TEMPLATES = {
    "default": {
        "tasks": ["领取电脑并登录企业邮箱", "完成信息安全培训"],
        "guides": [{"name": "企业邮箱", "url": "https://mail.example.com", "how": "用工号和初始密码登录"}],
    },
    "departments": {
        "研发": {
            "tasks": ["开通代码仓库权限"],
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


WELCOME = "张伟你好，欢迎加入研发！期待与你共事。"


class Writer:
    """The INJECTED write_welcome: records each call and returns a known text (or raises what it is given)."""

    def __init__(self, text: str | Exception = WELCOME, barrier: asyncio.Barrier | None = None):
        self.text, self.barrier, self.calls = text, barrier, []

    async def __call__(self, facts: Facts, system_prompt: str) -> str:
        self.calls.append((facts, system_prompt))
        if self.barrier is not None:
            await self.barrier.wait()  # both sessions are past their push-log read before either pushes
        if isinstance(self.text, Exception):
            raise self.text
        return self.text


def write_csv(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "hr.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def make_cfg(tmp_path: Path, templates=TEMPLATES, **hr) -> OnboardingConfig:
    return OnboardingConfig.model_validate(
        {
            "hr": {"source": "file", "file": str(tmp_path / "hr.csv"), **hr},
            "push_log": str(tmp_path / "push.sqlite"),
            "templates": templates,
        }
    )
