"""The `chat.onboarding` section of the config file: the onboarding helper's HR source (`hr.config`),
push log, window and plan templates (validated by `onboarding.plan.PlanTemplates`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from ernie_ops.config_section import Section
from ernie_ops.hr.config import HRConfig
from ernie_ops.onboarding.plan import PlanTemplates


def _default_templates() -> PlanTemplates:
    return PlanTemplates.model_validate(
        {"default": {"tasks": ["领取工牌和电脑，完成账号开通 / Collect your badge and laptop; activate your accounts",
                               "完成信息安全培训 / Complete the information-security training",
                               "与直属上级进行首周一对一沟通 / First-week one-to-one with your manager"]}}
    )  # fmt: skip


class OnboardingConfig(Section):
    """The onboarding helper (新员工入职助手): HR source, push log, and the templates per department and role."""

    hr: HRConfig = Field(default_factory=HRConfig)
    push_log: str = Field(
        "/var/lib/ernie-ops-chat/onboarding/pushlog.sqlite", min_length=1, description="SQLite push log (chat app's state dir)"
    )
    welcome_max_tokens: int = Field(300, ge=16, le=4096, description="tokens for the model's welcome message")
    active_days: int = Field(
        30,
        ge=0,
        le=366,
        description="days after the start date the helper still serves an employee (start + active_days is the last); "
        "30: the first month, the first week's plan with room for late confirmations and questions, as a 30-day "
        "onboarding plan runs; an HR export lists everyone, so the people who started before that are told onboarding is over",
    )
    templates: PlanTemplates = Field(default_factory=_default_templates, description="default / departments / roles: tasks and guides")

    @field_validator("templates", mode="before")
    @classmethod
    def _templates(cls, value: Any) -> PlanTemplates:
        if isinstance(value, PlanTemplates):
            return value
        if value is not None and not isinstance(value, Mapping):
            raise ValueError("must be a mapping with default and departments")
        return PlanTemplates.model_validate(value if value is not None else {})
