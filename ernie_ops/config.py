"""The one config file (`/etc/ernie-ops/ernie.yaml`): schema, defaults, loading and error reporting.

The launcher, the CLI and the chat app all read this file through `load()`. Every problem is
reported at once with file, line, field, bad value and what is allowed, because an operator
fixing a config at 3 a.m. should not have to run the check five times. Unknown keys are
errors: a typo such as `max_model_length` must not silently fall back to a default, and a key
given twice (two `model:` sections) is an error naming both lines, never a silent override.
"""

from __future__ import annotations

import difflib
import os
import re
import ssl
import string
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ernie_ops.errors import MISSING, ConfigError, ConfigProblem, UsageError
from ernie_ops.files import yamlfile

DEFAULT_PATH = "/etc/ernie-ops/ernie.yaml"
ENV_VAR = "ERNIE_OPS_CONFIG"


def _first_duplicate(values: list) -> Any:
    """The smallest value listed more than once (a stable choice for the error message), or None."""
    dupes = sorted({v for v in values if values.count(v) > 1})
    return dupes[0] if dupes else None


class _Section(BaseModel):
    # strict: YAML already gives real types, so "8000" (a string) for a port is a mistake to report.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelConfig(_Section):
    """Where the weights live and the name clients must use."""

    path: str = Field("/srv/models/ernie-4.5-0.3b-pt/current", min_length=1)
    served_name: str = Field("ernie-4.5-0.3b-pt", pattern=r"^[A-Za-z0-9._/-]+$")
    revision: str | None = Field(None, description="hub revision the weights came from (recorded, not fetched)")


class VllmConfig(_Section):
    """Engine settings turned into vLLM flags by `engine.build_command`."""

    accelerator: Literal["auto", "gpu", "cpu"] = "auto"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int = Field(8192, ge=64, le=131072)
    gpu_memory_utilization: float = Field(0.45, gt=0.0, le=0.98)
    max_num_seqs: int = Field(256, ge=1, le=4096)
    enable_prefix_caching: bool = True
    # CUDA graphs stay on for this dense model on GPU (eager mode costs it throughput there); CPU hosts may turn this on to start faster.
    enforce_eager: bool = False
    shutdown_drain_seconds: int = Field(30, ge=0, le=3600)
    stop_grace_seconds: float = Field(10.0, ge=1.0, le=600.0)
    cpu_kvcache_space_gib: int = Field(4, ge=1, le=1024)
    access_log: bool = False
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flags(cls, value: list[str]) -> list[str]:
        owned = {"--host", "--port", "--model", "--served-model-name", "--shutdown-timeout"}
        clash = sorted({a.split("=", 1)[0] for a in value} & owned)
        if clash:
            raise ValueError(f"{', '.join(clash)} is set by ernie-ops from the config; remove it from extra_args")
        return value


class InstanceConfig(_Section):
    """One vLLM server: a port, and the GPU (or CPU cores) it owns."""

    port: int = Field(ge=1024, le=65535)
    gpu: int | None = Field(None, ge=0, le=63)
    cpu_cores: str | None = Field(None, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

    @field_validator("cpu_cores")
    @classmethod
    def _ranges_ascend(cls, value: str | None) -> str | None:
        for part in (value or "").split(","):
            first, _, last = part.partition("-")
            if last and int(last) < int(first):
                raise ValueError(f"range {part} is reversed (it names no core); write {last}-{first}")
        return value


def parse_cpu_list(text: str) -> frozenset[int]:
    """ "0-3,6" -> {0, 1, 2, 3, 6} (the format of instances[].cpu_cores and of Linux's cpu lists)"""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _cpu_list_text(cpus: set[int] | frozenset[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5" """
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class PathsConfig(_Section):
    cache_dir: str = "/var/cache/ernie-ops"
    state_dir: str = "/var/lib/ernie-ops"


class GatewayConfig(_Section):
    """The nginx in front of the instances."""

    url: str = Field("http://127.0.0.1:80", pattern=r"^https?://")
    upstream_file: str = "/etc/nginx/ernie-ops/upstream.conf"
    nginx_binary: str = "/usr/sbin/nginx"
    nginx_args: list[str] = Field(default_factory=list)
    access_log: str | None = Field(
        "/var/log/nginx/ernie-ops.access.log",
        description="the gateway's access log (format ernie_ops): per-instance outcomes for the canary gate; null: vLLM's counters only",
    )
    ca_file: str | None = Field(
        None,
        description="an https url's certificate is verified against this CA file (a private CA, a lab's self-signed "
        "certificate); null: the system's trust store",
    )

    @field_validator("ca_file")
    @classmethod
    def _absolute_ca_file(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be the absolute path of the CA's PEM file, e.g. /etc/ernie-ops/tls/gateway.crt")
        return v

    def tls_verify(self) -> ssl.SSLContext | bool:
        """What an httpx client to `url` verifies the certificate with, as any client of the gateway would."""
        if not self.ca_file:
            return True
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"gateway.ca_file {self.ca_file}: {getattr(exc, 'strerror', None) or exc}; it must be the PEM file of the CA "
                "that signed the gateway's certificate (ernie_edge's self-signed one: /etc/ernie-ops/tls/gateway.crt)"
            ) from None


class HealthConfig(_Section):
    """How the launcher and the cutover decide that an instance can serve."""

    poll_interval_seconds: float = Field(0.1, gt=0.0, le=10.0)
    request_timeout_seconds: float = Field(5.0, gt=0.0, le=600.0)
    smoke_prompt: str = Field("Hello", min_length=1)
    smoke_max_tokens: int = Field(1, ge=1, le=64)
    smoke_timeout_seconds: float = Field(60.0, gt=0.0, le=3600.0)


def steps_problem(steps: list[int]) -> str | None:
    """Why canary steps are not percentages rising between 1 and 99; None when they are (config and --canary)."""
    for a, b in zip([0, *steps], steps, strict=False):
        if not 0 < b < 100:
            return f"step {b}% is not between 1 and 99 (100% comes after the last step by itself)"
        if b <= a:
            return f"steps must rise: {b}% after {a}%"
    return None


class SloConfig(_Section):
    """What a canary (or a baking new instance) must keep, judged per instance from deltas of its own counters
    and histograms in the same window as the baseline's. A quantile limit is judged as a share: "p99 <= T" holds
    when at most 1% of requests took longer than T, and that share is bounded (binomial, `confidence`) before
    a verdict, so a handful of requests is "inconclusive", never "pass"."""

    max_error_rate: float = Field(0.01, gt=0.0, lt=1.0, description="failed share of requests (gateway 5xx, vLLM error/abort)")
    ttft_quantile: float = Field(0.99, ge=0.5, lt=1.0, description="which time-to-first-token quantile is judged")
    ttft_seconds: float | None = Field(2.0, gt=0.0, le=600.0, description="its absolute limit; null: against the baseline only")
    itl_quantile: float = Field(0.99, ge=0.5, lt=1.0, description="which inter-token latency quantile is judged")
    itl_seconds: float | None = Field(0.5, gt=0.0, le=60.0, description="its absolute limit; null: against the baseline only")
    max_ratio: float = Field(1.5, ge=1.0, le=100.0, description="a canary's quantile may be this many times the baseline's")
    ratio_floor_seconds: float = Field(0.05, ge=0.0, le=60.0, description="below this a slower canary is not judged slower")
    confidence: float = Field(0.95, ge=0.5, le=0.999, description="of the bounds on error and slow-request shares")


class CutoverConfig(_Section):
    """`ernie-ops cutover`: bake window and canary steps (each overridable on the command line)."""

    bake_seconds: float = Field(
        0.0, ge=0.0, le=7 * 86400, description="watch the new instance this long with the old one warm; 0: none; 600 recommended"
    )
    canary_steps: list[int] = Field(default_factory=list, description="percent of traffic on the new instance per step, e.g. [5, 25, 50]")
    sticky: Literal["none", "api_key", "client"] = Field(
        "none", description="during canary steps, keep a client on one side: by API key (else address), or by address"
    )
    step_min_seconds: float = Field(60.0, ge=0.0, le=86400.0, description="each step is held at least this long")
    step_min_requests: int = Field(100, ge=1, le=10_000_000, description="and until the canary has served this many")
    step_max_seconds: float = Field(900.0, gt=0.0, le=7 * 86400, description="a step still inconclusive after this is rolled back")
    interval_seconds: float = Field(1.0, ge=0.1, le=60.0, description="how often both instances are measured and judged")
    window_seconds: float = Field(30.0, ge=0.5, le=3600.0, description="the recent window a breach is looked for in")
    synthetic_rps: float = Field(2.0, ge=0.0, le=100.0, description="own requests per second to each side while it has too few; 0: none")
    synthetic_max_tokens: int = Field(16, ge=2, le=256, description="tokens per synthetic request (two or more: inter-token latency)")
    slo: SloConfig = Field(default_factory=SloConfig)

    @field_validator("canary_steps")
    @classmethod
    def _steps_rise(cls, steps: list[int]) -> list[int]:
        if (problem := steps_problem(steps)) is not None:
            raise ValueError(problem)
        return steps


class ChatFieldConfig(_Section):
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


class ScenarioConfig(_Section):
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

    @field_validator("fields")
    @classmethod
    def _unique_fields(cls, fields: list[ChatFieldConfig]) -> list[ChatFieldConfig]:
        names = [f.name for f in fields]
        if (dupe := _first_duplicate(names)) is not None:
            raise ValueError(f"field '{dupe}' is listed more than once")
        return fields


class EmbeddingsConfig(_Section):
    """The optional dense retrieval path: an embedding model served by vLLM's OpenAI `/v1/embeddings`
    (e.g. a bge-small-zh-class BERT on its own `vllm serve --runner pooling` instance). Off by default."""

    enabled: bool = False
    url: str | None = Field(None, pattern=r"^https?://", description="base URL of the embedding server, e.g. http://127.0.0.1:8100")
    model: str | None = Field(None, min_length=1, description="its served model name")
    timeout_seconds: float = Field(30.0, gt=0.0, le=600.0)
    batch_size: int = Field(32, ge=1, le=1024)
    weight: float = Field(1.0, gt=0.0, le=10.0, description="the dense ranking's weight in reciprocal-rank fusion (lexical: 1)")

    @model_validator(mode="after")
    def _complete_when_on(self) -> EmbeddingsConfig:
        if self.enabled and (not self.url or not self.model):
            raise ValueError("enabled embeddings need `url` and `model` (the vLLM embedding server and its served name)")
        return self


class DocsCollectionConfig(_Section):
    """Who may search a shared collection from the chat app (the CLI, run by the operator, sees all)."""

    readers: list[str] = Field(default_factory=lambda: ["*"], description="user names, or '*' for every chat user")


class DocsConfig(_Section):
    """Document Q&A (`ernie-ops docs`, the chat app's retrieval scenarios). Defaults measured by
    benchmarks/docs_quality.py (see README: quality table)."""

    index_file: str = Field("/var/lib/ernie-ops-chat/docs/index.sqlite", min_length=1, description="SQLite index (chat app's state dir)")
    tokenizer: str = Field("unigram+bigram", description="index tokens: bigram | jieba | jieba+bigram | unigram+bigram | whitespace")
    chunk_chars: int = Field(400, ge=50, le=8000, description="passage size in characters")
    overlap_chars: int = Field(80, ge=0, le=4000, description="characters repeated between neighbouring passages")
    top_k: int = Field(4, ge=1, le=20, description="passages given to the model")
    min_coverage: float = Field(
        0.35, ge=0.0, le=1.0, description="below this share of the question's terms in the best passage: 'the documents do not answer this'"
    )
    max_file_mb: float = Field(20.0, gt=0.0, le=1024.0)
    max_pages: int = Field(2000, ge=1, le=100000)
    max_files_per_message: int = Field(10, ge=1, le=200)
    extract_timeout_seconds: float = Field(120.0, gt=0.0, le=3600.0)
    extract_memory_mb: int = Field(1024, ge=128, le=65536)
    collections: dict[str, DocsCollectionConfig] = Field(
        default_factory=dict, description="read access per shared collection; a collection not listed is readable by every user"
    )
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str) -> str:
        from ernie_ops.docs.tokens import TOKENIZERS

        if value not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer; choose one of {', '.join(TOKENIZERS)}")
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> DocsConfig:
        if self.overlap_chars >= self.chunk_chars:
            raise ValueError(f"overlap_chars ({self.overlap_chars}) must be smaller than chunk_chars ({self.chunk_chars})")
        return self


class CopyConfig(_Section):
    """Marketing copy (营销文案): the form's defaults, the rules every post must meet, and generation
    (the chat app's copy scenario and `ernie-ops copy batch`)."""

    posts: int = Field(3, ge=1, le=10, description="posts per product (the form's default)")
    channel: str = Field(
        "moments",
        description="where posts are published when the form or a batch row does not say: moments (朋友圈), weibo (微博) or"
        " xiaohongshu (小红书); each brings its length, hashtag, emoji and style rules (copy/channels.py). Moments is the"
        " marketing scenario's own (朋友圈文案)",
    )
    max_chars: int | None = Field(
        None,
        ge=5,
        le=2000,
        description="a post's limit, counted as a person counts (one per CJK character or emoji); null: the channel's"
        " (朋友圈 120, 微博 140, 小红书 1000), which a single number for every channel would contradict",
    )
    channel_max_chars: dict[str, int] = Field(
        default_factory=dict,
        description="a channel's limit instead of its preset's, e.g. {weibo: 2000} for Weibo's long posts; empty: the presets",
    )
    forbidden_words: list[str] | None = Field(None, description="null: the built-in list of absolute claims (copy/rules.py)")
    extra_forbidden_words: list[str] = Field(default_factory=list, description="added to forbidden_words (e.g. bare 最)")
    max_attempts: int = Field(
        3,
        ge=1,
        le=10,
        description="tries per post: a post too long, with a forbidden word, breaking its channel's rules or a"
        " near-duplicate of another of its set is regenerated, then shown flagged",
    )
    temperature: float = Field(0.9, ge=0.0, le=2.0)
    max_tokens: int | None = Field(
        None,
        ge=16,
        le=4096,
        description="tokens per generated post (the JSON around it included); null: the channel's (256-320, 小红书 1536), a"
        " 1000-character note needs more than a short post",
    )
    structured_output: bool = Field(True, description="ask vLLM for JSON by schema (response_format json_schema)")
    batch_concurrency: int = Field(8, ge=1, le=256, description="rows generated at once by a batch (chat upload and CLI default)")
    max_batch_rows: int = Field(5000, ge=1, le=1_000_000)

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str) -> str:
        from ernie_ops.copy import channels

        return channels.get(value).name

    @field_validator("channel_max_chars")
    @classmethod
    def _channel_limits(cls, value: dict[str, int]) -> dict[str, int]:
        from ernie_ops.copy import channels

        limits = {}
        for name, limit in value.items():
            if not 5 <= limit <= 2000:
                raise ValueError(f"the limit of channel {name!r} is {limit}; give a whole number from 5 to 2000")
            limits[channels.get(name).name] = limit
        return limits

    @field_validator("forbidden_words", "extra_forbidden_words")
    @classmethod
    def _words(cls, value: list[str] | None) -> list[str] | None:
        for word in value or []:
            if not word.strip():
                raise ValueError("a forbidden word is blank; remove it")
        return value

    def rules(self):
        """The copy.rules.Rules these settings describe."""
        from ernie_ops.copy.rules import DEFAULT_FORBIDDEN_WORDS, DEFAULT_MAX_CHARS, Rules

        words = tuple(self.forbidden_words) if self.forbidden_words is not None else DEFAULT_FORBIDDEN_WORDS
        limit = self.max_chars if self.max_chars is not None else DEFAULT_MAX_CHARS
        return Rules(max_chars=limit, forbidden_words=tuple(dict.fromkeys(words + tuple(self.extra_forbidden_words))))


class HRConfig(_Section):
    """Where the onboarding helper reads who a new employee is. The SCIM bearer token is NOT here: it is read
    from the environment variable `token_env` (the chat unit's EnvironmentFile, /etc/ernie-ops/chat.env)."""

    source: Literal["file", "scim"] = Field("file", description="file: an HR export (CSV/YAML); scim: a SCIM 2.0 server")
    file: str = Field("/etc/ernie-ops/hr-export.csv", min_length=1, description="the export file (source: file), re-read at each lookup")
    url: str | None = Field(None, pattern=r"^https?://", description="SCIM base URL, the part before /Users (source: scim)")
    token_env: str = Field("ERNIE_OPS_HR_TOKEN", pattern=r"^[A-Z_][A-Z0-9_]*$", description="environment variable holding the bearer token")
    lookup: Literal["userName", "employeeNumber"] = Field("userName", description="which SCIM attribute the chat login name is")
    start_date_attribute: str = Field(
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:startDate",
        min_length=1,
        description="SCIM has no standard start date: the attribute path your HR system uses",
    )
    connect_timeout_seconds: float = Field(3.0, gt=0.0, le=120.0)
    read_timeout_seconds: float = Field(10.0, gt=0.0, le=600.0)

    @model_validator(mode="after")
    def _url_for_scim(self) -> HRConfig:
        if self.source == "scim" and not self.url:
            raise ValueError("source scim needs `url`, the SCIM base URL (e.g. https://hr.example.com/scim/v2)")
        return self


def _default_onboarding_templates():
    from ernie_ops.onboarding.plan import PlanTemplates

    return PlanTemplates.model_validate(
        {"default": {"tasks": ["领取工牌和电脑，完成账号开通 / Collect your badge and laptop; activate your accounts",
                               "完成信息安全培训 / Complete the information-security training",
                               "与直属上级进行首周一对一沟通 / First-week one-to-one with your manager"]}}
    )  # fmt: skip


class OnboardingConfig(_Section):
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
    templates: Any = Field(default_factory=_default_onboarding_templates, description="default / departments / roles: tasks and guides")

    @field_validator("templates", mode="before")
    @classmethod
    def _templates(cls, value: Any) -> Any:
        from ernie_ops.onboarding.plan import PlanTemplates

        if isinstance(value, PlanTemplates):
            return value
        return PlanTemplates.model_validate(value if value is not None else {})


class ChatConfig(_Section):
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
    default_scenario: str | None = None
    scenarios: list[ScenarioConfig] | None = Field(None, min_length=1, description="null: the built-in scenarios")
    docs: DocsConfig = Field(default_factory=DocsConfig)
    marketing: CopyConfig = Field(default_factory=CopyConfig)
    onboarding: OnboardingConfig = Field(default_factory=OnboardingConfig)

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
        if (dupe := _first_duplicate(names)) is not None:
            raise ValueError(f"scenario '{dupe}' is listed more than once")
        return scenarios

    def effective_scenarios(self) -> list[ScenarioConfig]:
        """The configured scenarios, or the built-in ones (`chat.scenarios`)."""
        if self.scenarios is not None:
            return list(self.scenarios)
        from ernie_ops.chat.scenarios import BUILTIN

        return [ScenarioConfig.model_validate(s) for s in BUILTIN]


class MonitoringConfig(_Section):
    """What ernie-ops itself gives Prometheus (the ernie_monitoring role sets it)."""

    textfile: str | None = Field(
        None,
        description="cutover marks for the node exporter's textfile collector (a .prom file in its directory); null: none",
        pattern=r"^/.+\.prom$",
    )


class Config(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    instances: list[InstanceConfig] = Field(default_factory=lambda: [InstanceConfig(port=8000), InstanceConfig(port=8001)], min_length=1)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    cutover: CutoverConfig = Field(default_factory=CutoverConfig)
    chat: ChatConfig = Field(default_factory=ChatConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)

    @field_validator("instances")
    @classmethod
    def _unique_ports(cls, instances: list[InstanceConfig]) -> list[InstanceConfig]:
        ports = [i.port for i in instances]
        if (dupe := _first_duplicate(ports)) is not None:
            raise ValueError(f"port {dupe} is listed more than once; each instance needs its own port")
        return instances

    def instance(self, port: int) -> InstanceConfig:
        """The instance on `port`, or a usage error naming the configured ports."""
        for inst in self.instances:
            if inst.port == port:
                return inst
        known = ", ".join(str(i.port) for i in self.instances)
        raise UsageError(f"port {port} is not an instance in the config (instances: {known}); add it under `instances:`")

    def instance_index(self, port: int) -> int:
        return [i.port for i in self.instances].index(self.instance(port).port)

    def chat_gateway_url(self) -> str:
        return (self.chat.gateway_url or self.gateway.url).rstrip("/")


def resolve_path(explicit: str | None = None) -> str:
    """--config wins, then $ERNIE_OPS_CONFIG, then the standard path."""
    return explicit or os.environ.get(ENV_VAR) or DEFAULT_PATH


def load(path: str | None = None) -> Config:
    """Read, validate and return the config; raise ConfigError listing every problem."""
    source = resolve_path(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [ConfigProblem(source, None, "(file)", MISSING, f"not found; create it or point --config / ${ENV_VAR} at one")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(source, None, "(file)", MISSING, f"cannot be read: {exc}")]) from None
    return parse(text, source)


def parse(text: str, source: str = "<string>") -> Config:
    """Validate YAML text against the schema; the text-level half of `load`, for tests and tools."""
    try:
        doc = yamlfile.load(text)
    except yamlfile.DuplicateKeyError as exc:
        raise ConfigError([ConfigProblem(source, d.line, d.field, MISSING, d.advice) for d in exc.duplicates]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ConfigError([ConfigProblem(source, line, "(yaml)", MISSING, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    data, lines = ({} if doc.data is None else doc.data), doc.lines
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(source, 1, "(top level)", data, "must be a mapping of sections: " + _allowed(Config))])
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(err, data, lines, source) for err in exc.errors()]
        raise ConfigError(sorted(problems, key=lambda p: p.line or 0)) from None
    problems = [_located(path, message, data, lines, source) for path, message in _cross_checks(cfg, lines)]
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: p.line or 0))
    return cfg


def _cross_checks(cfg: Config, lines: dict[tuple, int] | None = None) -> list[tuple[tuple, str]]:
    """Rules that span fields or sections, as (key path, message): pydantic checks one field at a time."""
    out: list[tuple[tuple, str]] = _core_checks(cfg, lines or {})
    co = cfg.cutover
    if co.step_max_seconds < co.step_min_seconds:
        out.append(
            (
                ("cutover", "step_max_seconds"),
                f"{co.step_max_seconds:g} is below step_min_seconds {co.step_min_seconds:g}; no step could pass",
            )
        )
    if co.window_seconds < 2 * co.interval_seconds:
        out.append(
            (
                ("cutover", "window_seconds"),
                f"{co.window_seconds:g} s holds fewer than two measurements at interval_seconds {co.interval_seconds:g}; "
                f"make it at least {2 * co.interval_seconds:g}",
            )
        )
    chat = cfg.chat
    room = cfg.vllm.max_model_len - chat.max_tokens - chat.margin_tokens
    if room < 16:
        out.append(
            (
                ("chat", "max_tokens"),
                f"max_tokens {chat.max_tokens} + margin_tokens {chat.margin_tokens} leave {room} tokens for the prompt "
                f"within vllm.max_model_len {cfg.vllm.max_model_len}; at least 16 are needed",
            )
        )
    scenarios = chat.effective_scenarios()
    names = [s.name for s in scenarios]
    if chat.default_scenario is not None and chat.default_scenario not in names:
        out.append((("chat", "default_scenario"), f"not a scenario; scenarios: {', '.join(names)}"))
    for i, sc in enumerate(chat.scenarios or []):
        if sc.source_field is not None and sc.source_field not in {f.name for f in sc.fields}:
            out.append((("chat", "scenarios", i, "source_field"), "not a field of this scenario"))
        if sc.prompt_template is None:
            continue
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(sc.prompt_template) if f is not None}
        except ValueError as exc:
            out.append((("chat", "scenarios", i, "prompt_template"), f"not a valid template: {exc}"))
            continue
        unknown = sorted(used - {f.name for f in sc.fields} - {"request"})
        if unknown:
            known = ", ".join(["request", *[f.name for f in sc.fields]])
            out.append((("chat", "scenarios", i, "prompt_template"), f"{{{unknown[0]}}} is not a field of this scenario; known: {known}"))
    return out


def _core_checks(cfg: Config, lines: dict[tuple, int]) -> list[tuple[tuple, str]]:
    """CPU instances must not share cores: one bound to its neighbour's cores never becomes ready beside it (measured).

    Only explicit `cpu_cores` can be compared here. The default split (`engine.cpu_cores_for`: instance
    k of n gets the k-th 1/n of the host's cores) knows nothing of named cores, so whether it overlaps
    them depends on the host's core count: named on some instances and not on others is refused too.
    "auto" is checked like "cpu": cpu_cores only matter on CPU, so naming overlapping ones is a mistake anyway.
    """
    if cfg.vllm.accelerator == "gpu":
        return []
    named = [(i, inst, parse_cpu_list(inst.cpu_cores)) for i, inst in enumerate(cfg.instances) if inst.cpu_cores]
    if not named:
        return []

    def where(i: int) -> str:
        line = lines.get(("instances", i, "cpu_cores")) or lines.get(("instances", i))
        return f"instances[{i}], port {cfg.instances[i].port}" + (f", line {line}" if line else "")

    gpu_hint = "; on a GPU host set vllm.accelerator: gpu (cpu_cores are not used there)" if cfg.vllm.accelerator == "auto" else ""
    out: list[tuple[tuple, str]] = []
    for n, (i, inst, cores) in enumerate(named):
        for j, other, other_cores in named[:n]:
            shared = cores & other_cores
            if shared:
                out.append(
                    (
                        ("instances", i, "cpu_cores"),
                        f"instance {inst.port} shares core(s) {_cpu_list_text(shared)} with instance {other.port} "
                        f"({where(j)}, cpu_cores '{other.cpu_cores}'): on CPU an instance bound to its neighbour's cores "
                        f"never becomes ready beside it; give each instance its own cores{gpu_hint}",
                    )
                )
    first = named[0]
    for i, inst in enumerate(cfg.instances):
        if not inst.cpu_cores:
            out.append(
                (
                    ("instances", i, "cpu_cores"),
                    f"not set for instance {inst.port}, but instance {first[1].port} ({where(first[0])}) names cores "
                    f"'{first[1].cpu_cores}': the default split of the host's cores ignores named cores and can overlap them; "
                    f"set cpu_cores on every instance, or on none{gpu_hint}",
                )
            )
    return out


def _located(path: tuple, message: str, data: dict, lines: dict[tuple, int], source: str) -> ConfigProblem:
    field = yamlfile.dotted(path)
    line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
    return ConfigProblem(source, line, field, _lookup(data, path), message)


def _data_path(loc: tuple) -> tuple:
    """Drop pydantic's union/validator tags from an error location, keeping field names and indexes."""
    out: list[Any] = []
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.isidentifier() and part not in _TYPE_TAGS):
            out.append(part)
        else:
            break
    return tuple(out)


_TYPE_TAGS = {"int", "float", "str", "bool", "none", "list", "dict", "literal"}


def _lookup(data: Any, path: tuple) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return data


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The schema class that owns the last key of `path` (to list allowed keys)."""
    model: Any = Config
    for part in path[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        model = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return None
    return model


def _allowed(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _problem(err: dict, data: dict, lines: dict[tuple, int], source: str) -> ConfigProblem:
    path = _data_path(tuple(err["loc"]))
    field = yamlfile.dotted(path) or "(top level)"
    line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
    value = _lookup(data, path)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(path)
        msg = "unknown key"
        if model is not None:
            close = difflib.get_close_matches(str(path[-1]), list(model.model_fields), n=1)
            msg += f" (did you mean '{close[0]}'?)" if close else ""
            msg += f"; allowed here: {_allowed(model)}"
        return ConfigProblem(source, line, field, value, msg)
    if kind == "missing":
        return ConfigProblem(source, line, field, MISSING, "required; add it")
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return ConfigProblem(source, line, field, value, message)


def dump(config: Config) -> str:
    """The resolved config as YAML (what `config check` prints)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
