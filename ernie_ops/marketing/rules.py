"""The rules one marketing post must meet, as checks (never edits), and parsing the model's posts: its length in
graphemes as a person counts them (`count_chars`), too long / a channel's rules / forbidden words found in a folded
copy of the post, each with its span as written (`check`), near-duplicates by character 3-gram Jaccard
(`similarity`), and the guided JSON the model returns (`parse_posts`). A failing post is reported, never truncated.
Why, and each rule in full: docs/design/marketing-rules.md.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
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
_DROPPED = regex.compile(r"[\s\p{Default_Ignorable_Code_Point}]+")
_NOT_A_WORD = regex.compile(r"[\p{P}\p{S}]+")  # left out of the shingles: punctuation, symbols, emoji
SHINGLE = 3  # characters per shingle
NEAR_DUPLICATE = 0.5  # Jaccard of the 3-gram sets at or above which a post repeats an earlier one (measured in the tests)


def count_chars(text: str) -> int:
    """Characters as a person counts them: extended grapheme clusters (see the module docstring)."""
    return len(_GRAPHEME.findall(text))


def _fold_piece(piece: str) -> str:
    return _DROPPED.sub("", unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", piece).casefold()))


def fold(text: str) -> str:
    """The text as matched: NFKC, case folded, without white space or invisible characters (module docstring)."""
    return _fold_piece(text)


@dataclass(frozen=True)
class Folded:
    """A folded copy of a text and, for each of its characters, the span (start, end) in the text it came from."""

    text: str
    spans: tuple[tuple[int, int], ...]

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span in the original text of the folded characters start..end (end exclusive, end > start)."""
        return self.spans[start][0], self.spans[end - 1][1]


def fold_with_spans(text: str) -> Folded:
    """`fold(text)`, keeping where each folded character came from. Folded one grapheme cluster at a time:
    NFKC composes only within a cluster (a letter and its combining marks), so the pieces join to `fold(text)`."""
    chars: list[str] = []
    spans: list[tuple[int, int]] = []
    for cluster in _GRAPHEME.finditer(text):
        piece = _fold_piece(cluster.group())
        chars.append(piece)
        spans.extend([cluster.span()] * len(piece))
    return Folded("".join(chars), tuple(spans))


@dataclass(frozen=True)
class Rules:
    """What one post must meet; `forbidden_words` comes from config, defaulting to the list above."""

    max_chars: int = DEFAULT_MAX_CHARS
    forbidden_words: tuple[str, ...] = field(default=DEFAULT_FORBIDDEN_WORDS)
    # a channel's rules (marketing/channels.py); the defaults check nothing more than length and words
    hashtags: tuple[int, int] | None = None  # (fewest, most) hashtags
    hashtags_at_end: bool = False  # the hashtags after the text, none inside it
    max_emoji: int | None = None
    line_breaks: bool = True  # False: the post must be one paragraph
    title_max: int | None = None  # the first line is a title of at most this many characters, the text follows

    def __post_init__(self) -> None:
        if not isinstance(self.max_chars, int) or isinstance(self.max_chars, bool) or self.max_chars < 1:
            raise UsageError(f"max_chars = {self.max_chars!r} is not a positive whole number; give e.g. 60.")
        if self.hashtags is not None and not 0 <= self.hashtags[0] <= self.hashtags[1]:
            raise UsageError(f"hashtags = {self.hashtags!r} is not a range (fewest, most); give e.g. (1, 2).")
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
    character, counted as `count_chars` does) and its index in the Python string (for highlighting);
    end/written: the end of the match in the Python string and the text there as written (１００％, 第 一).
    similar_to/similarity: for duplicate, the 1-based index of the earlier post it repeats and their similarity.
    """

    kind: str
    message: str
    count: int | None = None
    limit: int | None = None
    word: str | None = None
    position: int | None = None
    offset: int | None = None
    end: int | None = None
    written: str | None = None
    similar_to: int | None = None
    similarity: float | None = None
    low: int | None = None  # for hashtags: the fewest the channel wants

    @property
    def flag(self) -> str:
        """Short form for a results file: "too_long:72/60", "forbidden:最佳@5" or "duplicate_of:1~0.82"."""
        if self.kind == "too_long":
            return f"too_long:{self.count}/{self.limit}"
        if self.kind == "forbidden":
            return f"forbidden:{self.word}@{self.position}"
        if self.kind == "duplicate":
            return f"duplicate_of:{self.similar_to}~{self.similarity:.2f}"
        if self.kind == "hashtags" and self.count is not None:
            return f"hashtags:{self.count}/{self.low}-{self.limit}"
        if self.kind in ("emoji", "title", "line_breaks") and self.count is not None:
            return f"{self.kind}:{self.count}/{self.limit}"
        return self.kind if self.word is None else f"{self.kind}:{self.word}"


def _word_pattern(folded_word: str) -> str:
    """A folded listed word as a pattern; a digit at either end must not continue a number (TOP1 is not TOP10)."""
    pattern = regex.escape(folded_word)
    if folded_word[:1].isdigit():
        pattern = r"(?<!\d)" + pattern
    if folded_word[-1:].isdigit():
        pattern += r"(?!\d)"
    return pattern


def _forbidden_pattern(folded_words: list[str]) -> regex.Pattern[str] | None:
    if not folded_words:
        return None
    # Longest first, so at one place the longest listed word wins (全网最低 over 最低).
    ordered = sorted(set(folded_words), key=len, reverse=True)
    return regex.compile("|".join(_word_pattern(w) for w in ordered))


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
    problems.extend(channel_problems(post, rules))
    problems.extend(forbidden(post, rules.forbidden_words))
    return problems


_HASHTAG = regex.compile(r"#[^#\s]{1,40}#|#[^#\s]+")  # Weibo's #话题# or a #标签 that ends at a space
_EMOJI = regex.compile(r"\p{Extended_Pictographic}|\p{Regional_Indicator}")
_LINE_BREAK = regex.compile(r"\r\n|[\n\r\u2028\u2029\x0b\x0c\x85]")
_WORDS = regex.compile(r"[\p{L}\p{N}]")


def hashtags(post: str) -> list[str]:
    """The hashtags of a post as written (#话题# or #标签), full-width ＃ included."""
    folded = unicodedata.normalize("NFKC", post)
    return _HASHTAG.findall(folded)


def count_emoji(post: str) -> int:
    """Emoji as a person counts them: grapheme clusters holding a pictograph or a flag's regional indicators."""
    return sum(1 for cluster in _GRAPHEME.findall(post) if _EMOJI.search(cluster))


def channel_problems(post: str, rules: Rules) -> list[Problem]:
    """What a post breaks of its channel's rules (hashtags, emoji, line breaks, title); see marketing/channels.py."""
    problems: list[Problem] = []
    if rules.title_max is not None:
        lines = [line for line in _LINE_BREAK.split(post.strip()) if line.strip()]
        if len(lines) < 2:
            problems.append(
                Problem("title", "no title line: the first line is the title, the text follows on the next lines.", word="missing")
            )
        elif (title := count_chars(lines[0].strip())) > rules.title_max:
            problems.append(
                Problem("title", f"the title is {title} characters, over {rules.title_max}.", count=title, limit=rules.title_max)
            )
    if rules.hashtags is not None:
        tags = hashtags(post)
        low, high = rules.hashtags
        if not low <= len(tags) <= high:
            want = "none" if high == 0 else f"{low}-{high}"
            problems.append(Problem("hashtags", f"{len(tags)} hashtag(s), the channel wants {want}.", count=len(tags), limit=high, low=low))
        elif tags and rules.hashtags_at_end:
            folded = unicodedata.normalize("NFKC", post)
            tail = folded[folded.find(tags[0]) :]
            if _WORDS.search(_HASHTAG.sub("", tail)):
                problems.append(Problem("hashtags", "hashtags inside the text: put them at the end.", word="not_at_end"))
    if rules.max_emoji is not None and (emoji := count_emoji(post)) > rules.max_emoji:
        problems.append(Problem("emoji", f"{emoji} emoji, over the channel's {rules.max_emoji}.", count=emoji, limit=rules.max_emoji))
    if not rules.line_breaks and (breaks := len(_LINE_BREAK.findall(post.strip()))):
        problems.append(
            Problem("line_breaks", f"{breaks} line break(s): the channel shows a post as one paragraph.", count=breaks, limit=0)
        )
    return problems


def forbidden(post: str, words: tuple[str, ...]) -> list[Problem]:
    """Each listed word in `post`, matched on its folded copy, reported with its span as written."""
    canonical: dict[str, str] = {}
    for word in words:
        canonical.setdefault(fold(word), word)  # a word that folds to nothing (only white space) cannot be listed
    pattern = _forbidden_pattern([w for w in canonical if w])
    if pattern is None:
        return []
    folded = fold_with_spans(post)
    problems = []
    for match in pattern.finditer(folded.text):
        word = canonical[match.group()]
        start, end = folded.original(match.start(), match.end())
        written = post[start:end]
        position = count_chars(post[:start]) + 1
        shown = "" if written == word else f" (written {written!r})"
        problems.append(
            Problem(
                kind="forbidden",
                message=f"forbidden absolute claim {word!r} at character {position}{shown}.",
                word=word,
                position=position,
                offset=start,
                end=end,
                written=written,
            )
        )
    return problems


def shingles(text: str, n: int = SHINGLE) -> frozenset[str]:
    """The character n-grams of the folded text without punctuation, symbols and emoji; a shorter non-empty
    text is its own single shingle."""
    letters = _NOT_A_WORD.sub("", fold(text))
    if len(letters) < n:
        return frozenset([letters] if letters else [])
    return frozenset(letters[i : i + n] for i in range(len(letters) - n + 1))


def similarity(a: str, b: str, n: int = SHINGLE) -> float:
    """Jaccard similarity (0..1) of the two texts' shingle sets; two texts without any letters are 1.0 alike
    when they fold to the same text, else 0.0."""
    sa, sb = shingles(a, n), shingles(b, n)
    if not sa or not sb:
        return 1.0 if fold(a) == fold(b) else 0.0
    return len(sa & sb) / len(sa | sb)


def near_duplicate(post: str, earlier: Sequence[str | None], threshold: float = NEAR_DUPLICATE) -> Problem | None:
    """The most similar of the `earlier` posts of the set (1-based index; None entries are skipped) when it is
    at or above `threshold`, as a "duplicate" problem; None when the post is distinct from all."""
    best: tuple[float, int] | None = None
    for index, other in enumerate(earlier, start=1):
        if other is None:
            continue
        score = similarity(post, other)
        if score >= threshold and (best is None or score > best[0]):
            best = (score, index)
    if best is None:
        return None
    score, index = best
    return Problem(
        kind="duplicate",
        message=f"{score:.0%} like post {index} of the same set (near-duplicate threshold {threshold:.0%}).",
        similar_to=index,
        similarity=round(score, 4),
    )


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
