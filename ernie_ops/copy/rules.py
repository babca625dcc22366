"""The rules one marketing post must meet, as checks (never edits), and parsing the model's posts.

Counting (`count_chars`): a post's length is what a person counts looking at it, which is the number of
extended grapheme clusters (Unicode UAX #29, the `regex` module's \\X), not `len()`:
- one per CJK character and one per CJK punctuation mark (，。！);
- one per emoji, including ZWJ sequences (👨‍👩‍👧 is 5 code points), flags (🇨🇳 is 2 regional indicators),
  skin-tone modifiers (👍🏽) and keycaps (1️⃣);
- one per Latin letter, digit or punctuation mark; a letter with a combining accent (e + ◌́) is one;
- whitespace is counted as typed: each space is one (it takes a place in the post as published, and the
  platforms that limit a post's length count it too), a line break is one ("\\r\\n" is one cluster).
  Nothing is stripped: leading and trailing spaces count as well, so the caller decides about them.

Checks (`check`): too long (with the count and the limit) and each forbidden word found (with the word and its
position). A post that fails is reported, never truncated: cutting mid-word is what the issue forbids.

Forbidden words: the default list is the absolute claims the PRC Advertising Law (广告法 article 9(3): 国家级、
最高级、最佳) forbids and the terms regulators' guidance names with it. Bare 最 is NOT in the default list: as a
substring it flags neutral words (最近, 最后), which would make every such post regenerate; its superlative
compounds are listed instead. A site that wants bare 最 adds it in config. Matching is a plain substring
search, case-insensitive for Latin letters (NO.1 = No.1); where two listed words overlap (全网最低 and 最低)
the longest match at a place is reported, once. Full-width variants (１００％) are not folded.

Parsing (`parse_posts`): the model is asked for JSON {"posts": ["...", ...]} (guided decoding). Tolerated: white
space around it and one code fence around it (```json ... ```), which weak models add even when guided.
Anything else is an error naming what is wrong: not JSON, not an object, no "posts" list, a post that is not a
non-empty string, or a number of posts other than the one asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import regex

from ernie_ops.errors import ErnieOpsError, UsageError

DEFAULT_MAX_CHARS = 60

DEFAULT_FORBIDDEN_WORDS: tuple[str, ...] = (
    # 最 compounds (superlatives)
    "最佳",
    "最好",
    "最优",
    "最强",
    "最高级",
    "最高端",
    "最先进",
    "最大程度",
    "最便宜",
    "最低价",
    "最受欢迎",
    "全网最低",
    # rank and level
    "第一",
    "NO.1",
    "TOP1",
    "国家级",
    "世界级",
    "全球级",
    "顶级",
    "极致",
    "极品",
    "首个",
    "首家",
    "首选",
    "唯一",
    "独一无二",
    "绝无仅有",
    "史无前例",
    # absolute guarantees
    "100%",
    "百分之百",
    "绝对",
    "万能",
    "永久",
    "零风险",
)

_GRAPHEME = regex.compile(r"\X")


def count_chars(text: str) -> int:
    """Characters as a person counts them: extended grapheme clusters (see the module docstring)."""
    return len(_GRAPHEME.findall(text))


@dataclass(frozen=True)
class Rules:
    """What one post must meet; `forbidden_words` comes from config, defaulting to the list above."""

    max_chars: int = DEFAULT_MAX_CHARS
    forbidden_words: tuple[str, ...] = field(default=DEFAULT_FORBIDDEN_WORDS)

    def __post_init__(self) -> None:
        if not isinstance(self.max_chars, int) or isinstance(self.max_chars, bool) or self.max_chars < 1:
            raise UsageError(f"max_chars = {self.max_chars!r} is not a positive whole number; give e.g. 60.")
        words = tuple(self.forbidden_words)
        for word in words:
            if not isinstance(word, str) or not word.strip():
                raise UsageError(f"forbidden word {word!r} is empty or not text; remove it from the list.")
        object.__setattr__(self, "forbidden_words", words)


@dataclass(frozen=True)
class Problem:
    """One rule a post breaks.

    kind: "too_long" or "forbidden".
    count/limit: for too_long, the post's count and the limit.
    word/position/offset: for forbidden, the listed word, its position as a person counts (1-based, the Nth
    character, counted as `count_chars` does) and its index in the Python string (for highlighting).
    """

    kind: str
    message: str
    count: int | None = None
    limit: int | None = None
    word: str | None = None
    position: int | None = None
    offset: int | None = None

    @property
    def flag(self) -> str:
        """Short form for a results file: "too_long:72/60" or "forbidden:最佳@5"."""
        if self.kind == "too_long":
            return f"too_long:{self.count}/{self.limit}"
        return f"forbidden:{self.word}@{self.position}"


def _forbidden_pattern(words: tuple[str, ...]) -> regex.Pattern[str] | None:
    if not words:
        return None
    # Longest first, so at one place the longest listed word wins (全网最低 over 最低).
    ordered = sorted(set(words), key=len, reverse=True)
    return regex.compile("|".join(regex.escape(w) for w in ordered), regex.IGNORECASE)


def check(post: str, rules: Rules) -> list[Problem]:
    """Every rule `post` breaks, in reading order (length first); an empty list means it passes."""
    problems: list[Problem] = []
    count = count_chars(post)
    if count > rules.max_chars:
        problems.append(
            Problem(
                kind="too_long",
                message=f"{count} characters, over the limit of {rules.max_chars}.",
                count=count,
                limit=rules.max_chars,
            )
        )
    pattern = _forbidden_pattern(rules.forbidden_words)
    if pattern is not None:
        canonical = {w.casefold(): w for w in rules.forbidden_words}
        for match in pattern.finditer(post):
            word = canonical.get(match.group().casefold(), match.group())
            position = count_chars(post[: match.start()]) + 1
            problems.append(
                Problem(
                    kind="forbidden",
                    message=f"forbidden absolute claim {word!r} at character {position}.",
                    word=word,
                    position=position,
                    offset=match.start(),
                )
            )
    return problems


class PostsFormatError(ErnieOpsError):
    """The model's answer is not the {"posts": [...]} asked for."""


_FENCE = regex.compile(r"\A```[A-Za-z0-9_-]*\s*(?P<body>.*?)\s*```\Z", regex.DOTALL)


def parse_posts(json_text: str, n: int) -> list[str]:
    """The n posts in the model's structured answer {"posts": [...]}; PostsFormatError otherwise."""
    text = json_text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
    if not text:
        raise PostsFormatError('The model\'s answer is empty; expected JSON {"posts": [...]}.')
    try:
        data = json.loads(text, strict=False)  # control characters inside a string: guided decoding (xgrammar) allows them
    except json.JSONDecodeError as e:
        where = f"{e.msg} at line {e.lineno} column {e.colno}"
        raise PostsFormatError(f'The model\'s answer is not JSON ({where}); expected {{"posts": [...]}}.') from None
    if not isinstance(data, dict):
        raise PostsFormatError(f'The model\'s answer is a JSON {type(data).__name__}, not an object {{"posts": [...]}}.')
    if "posts" not in data:
        raise PostsFormatError(f'The model\'s answer has no "posts" key (keys: {", ".join(sorted(data)) or "none"}).')
    posts = data["posts"]
    if not isinstance(posts, list):
        raise PostsFormatError(f'"posts" in the model\'s answer is a {type(posts).__name__}, not a list.')
    for i, post in enumerate(posts, start=1):
        if not isinstance(post, str):
            raise PostsFormatError(f"Post {i} in the model's answer is a {type(post).__name__}, not text.")
        if not post.strip():
            raise PostsFormatError(f"Post {i} in the model's answer is empty.")
    if len(posts) != n:
        raise PostsFormatError(f"The model's answer has {len(posts)} post(s), {n} were asked for.")
    return posts
