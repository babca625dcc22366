"""The `chat.marketing` section of the config file: marketing copy (the form's defaults, the rules every
post must meet, generation and batches)."""

from __future__ import annotations

from pydantic import Field, field_validator

from ernie_ops.config_section import Section
from ernie_ops.marketing import channels
from ernie_ops.marketing.rules import DEFAULT_FORBIDDEN_WORDS, DEFAULT_MAX_CHARS, Rules


class MarketingConfig(Section):
    """Marketing copy (营销文案): the form's defaults, the rules every post must meet, and generation
    (the chat app's copy scenario and `ernie-ops copy batch`)."""

    posts: int = Field(3, ge=1, le=10, description="posts per product (the form's default)")
    channel: str = Field(
        "moments",
        description="where posts are published when the form or a batch row does not say: moments (朋友圈), weibo (微博) or"
        " xiaohongshu (小红书); each brings its length, hashtag, emoji and style rules (marketing/channels.py). Moments is the"
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
    forbidden_words: list[str] | None = Field(None, description="null: the built-in list of absolute claims (marketing/rules.py)")
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
    read_timeout_seconds: float = Field(
        60.0, gt=0.0, le=3600.0, description="an uploaded products file is read in a child process, stopped after this"
    )
    read_memory_mb: int = Field(1024, ge=128, le=65536, description="and limited to this much memory")

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str) -> str:
        return channels.get(value).name

    @field_validator("channel_max_chars")
    @classmethod
    def _channel_limits(cls, value: dict[str, int]) -> dict[str, int]:
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

    def rules(self) -> Rules:
        """The marketing.rules.Rules these settings describe."""
        words = tuple(self.forbidden_words) if self.forbidden_words is not None else DEFAULT_FORBIDDEN_WORDS
        limit = self.max_chars if self.max_chars is not None else DEFAULT_MAX_CHARS
        return Rules(max_chars=limit, forbidden_words=tuple(dict.fromkeys(words + tuple(self.extra_forbidden_words))))
