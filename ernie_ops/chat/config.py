"""The `chat` section of the config file: the Chainlit chat app, its scenarios, and the sections of the
features it hosts (`chat.docs`, `chat.marketing`, `chat.onboarding`, `chat.history`), each owned by its feature's package."""

from __future__ import annotations

import re
import string
from typing import Literal

from pydantic import Field, field_validator

from ernie_ops.chat.scenarios import BUILTIN
from ernie_ops.config_section import Section, first_duplicate
from ernie_ops.docs.config import DocsConfig
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.onboarding.config import OnboardingConfig
from ernie_ops.threads.config import HistoryConfig


class ChatFieldConfig(Section):
    """One piece of information a scenario collects before it generates (the collecting_info state)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="placeholder name in prompt_template")
    label: str = Field(min_length=1, description="how the app asks for it, e.g. 电话 / phone")
    aliases: list[str] = Field(default_factory=list, description="more labels a user may type before the value ('手机:')")
    pattern: str | None = Field(None, description="regex a value must match; also finds an unlabelled value in a message")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class ScenarioConfig(Section):
    """A business scenario of the chat app: a chat profile with its system prompt, starters and fields."""

    name: str = Field(pattern=r"^[^\x00-\x1f/]{1,40}$", description="profile name shown in the UI")
    description: str = ""
    system_prompt: str = Field(min_length=1)
    fields: list[ChatFieldConfig] = Field(default_factory=list)
    prompt_template: str | None = Field(None, description="the first request once every field is known; {request} + field names")
    starters: list[str] = Field(default_factory=list, max_length=6)
    source_field: str | None = Field(None, description="a field shown beside each reply as its source (引用溯源: the reader can check it)")
    retrieval: bool = Field(False, description="answer from the indexed documents (chat.docs) with numbered sources; file upload on")
    tool: Literal["copy", "onboarding"] | None = Field(
        None, description="copy: marketing-copy form, cards, batch files (chat.marketing); onboarding: HR-fed helper (chat.onboarding)"
    )

    @property
    def takes_files(self) -> bool:
        """Whether the scenario reads uploads (documents for retrieval, product lists for copy): its paper clip, and
        the app's upload route, are on only then."""
        return self.retrieval or self.tool == "copy"

    @field_validator("fields")
    @classmethod
    def _unique_fields(cls, fields: list[ChatFieldConfig]) -> list[ChatFieldConfig]:
        names = [f.name for f in fields]
        if (dupe := first_duplicate(names)) is not None:
            raise ValueError(f"field '{dupe}' is listed more than once")
        return fields


class ChatConfig(Section):
    """The Chainlit chat app (`ernie-ops chat`, ernie-chainlit.service), behind nginx's `location /`."""

    host: str = "127.0.0.1"
    port: int = Field(8500, ge=1024, le=65535)
    root_path: str = Field("", pattern=r"^(/[A-Za-z0-9._~-]+)*$", description="'' when nginx serves the app at /")
    gateway_url: str | None = Field(None, pattern=r"^https?://", description="null: gateway.url (never a fixed instance)")
    users_file: str = Field("/etc/ernie-ops/chat-users.yaml", min_length=1)
    app_name: str = Field("ERNIE", min_length=1, max_length=40)
    connect_timeout_seconds: float = Field(5.0, gt=0.0, le=120.0)
    read_timeout_seconds: float = Field(60.0, gt=0.0, le=3600.0)
    reply_timeout_seconds: float = Field(600.0, gt=0.0, le=7200.0)
    max_tokens: int = Field(1024, ge=1, le=131072)
    margin_tokens: int = Field(32, ge=0, le=4096)
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    extra_body: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="more /v1/chat/completions fields, e.g. vLLM sampling (top_p, repetition_penalty)"
    )
    cleanup: bool = True
    indent_cjk_paragraphs: bool = False
    session_timeout_seconds: int = Field(3600, ge=60, le=86400 * 30)
    restart_drain_seconds: float = Field(
        20.0, ge=0.0, le=25.0,
        description="on a stop or restart, how long answers in flight may finish first (within the unit's TimeoutStopSec=30)",
    )  # fmt: skip
    upload_quota_mb: float = Field(
        500.0, gt=0.0, le=1_048_576.0,
        description="the uploads one user's conversations may hold in all (stored with their threads, plus those not yet "
        "answered); a file past it is refused with the sizes, and deleting old conversations frees room",
    )  # fmt: skip
    file_reads_at_once: int = Field(
        2, ge=1, le=64,
        description="uploads read at once, each in its isolated child (a document's extraction, a product list), across "
        "all users; more wait their turn. The unit's MemoryMax= must hold this many children (upload_limits.memory_mb)",
    )  # fmt: skip
    default_scenario: str | None = None
    scenarios: list[ScenarioConfig] | None = Field(None, min_length=1, description="null: the built-in scenarios")
    docs: DocsConfig = Field(default_factory=DocsConfig)
    marketing: MarketingConfig = Field(default_factory=MarketingConfig)
    onboarding: OnboardingConfig = Field(default_factory=OnboardingConfig)
    history: HistoryConfig = Field(default_factory=HistoryConfig)

    @field_validator("extra_body")
    @classmethod
    def _no_owned_keys(cls, value: dict) -> dict:
        owned = {"model", "messages", "stream", "max_tokens", "max_completion_tokens", "temperature"}
        clash = sorted(set(value) & owned)
        if clash:
            raise ValueError(f"{', '.join(clash)} is set by the chat app (chat.max_tokens, chat.temperature); remove it from extra_body")
        return value

    @field_validator("scenarios")
    @classmethod
    def _unique_scenarios(cls, scenarios: list[ScenarioConfig] | None) -> list[ScenarioConfig] | None:
        names = [s.name for s in scenarios or []]
        if (dupe := first_duplicate(names)) is not None:
            raise ValueError(f"scenario '{dupe}' is listed more than once")
        return scenarios

    def effective_scenarios(self) -> list[ScenarioConfig]:
        """The configured scenarios, or the built-in ones (`chat.scenarios`)."""
        if self.scenarios is not None:
            return list(self.scenarios)
        return [ScenarioConfig.model_validate(s) for s in BUILTIN]

    def scenario_problems(self) -> list[tuple[tuple, str]]:
        """Rules across a scenario's fields and the scenario list, as (key path below `chat`, message)."""
        out: list[tuple[tuple, str]] = []
        scenarios = self.effective_scenarios()
        names = [s.name for s in scenarios]
        if self.default_scenario is not None and self.default_scenario not in names:
            out.append((("default_scenario",), f"not a scenario; scenarios: {', '.join(names)}"))
        for i, sc in enumerate(self.scenarios or []):
            if sc.source_field is not None and sc.source_field not in {f.name for f in sc.fields}:
                out.append((("scenarios", i, "source_field"), "not a field of this scenario"))
            if sc.prompt_template is None:
                continue
            try:
                used = {f for _, f, _, _ in string.Formatter().parse(sc.prompt_template) if f is not None}
            except ValueError as exc:
                out.append((("scenarios", i, "prompt_template"), f"not a valid template: {exc}"))
                continue
            unknown = sorted(used - {f.name for f in sc.fields} - {"request"})
            if unknown:
                known = ", ".join(["request", *[f.name for f in sc.fields]])
                out.append((("scenarios", i, "prompt_template"), f"{{{unknown[0]}}} is not a field of this scenario; known: {known}"))
        return out
