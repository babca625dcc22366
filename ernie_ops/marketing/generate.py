"""Generating marketing posts through the gateway: the form's request, the prompt, and regeneration.

- `CopyRequest.from_form` validates what a browser form sends (every value may be a string) and reports EVERY bad
  field at once (`FormError.problems`: field -> bilingual sentence, shown under its input); `from_product` makes a
  request from a batch row, with the config's defaults for what the row leaves empty.
- One post = one request (`CopyWriter.post`), so the N posts of a form are N concurrent requests
  (`CopyWriter.posts`) and a card's "regenerate" is one more. Each request asks for the JSON {"posts": ["..."]}
  by schema (vLLM's OpenAI `response_format` {"type": "json_schema", ...}, guided decoding), so even a weak model
  answers parseably. The schema has NO maxLength: the grammar would end the string at the limit and cut the post
  mid-word (a post is never cut); the limit is told in the prompt and checked after (marketing/rules.py).
- A post too long, with a forbidden word, or whose answer does not parse (e.g. the model ran out of max_tokens
  inside the JSON) is asked for again, up to `max_attempts` tries in all, each retry saying what was wrong with
  the previous one. After the last try the best one is returned flagged (parsed beats unparsed, then fewer
  problems); a never-parsed post carries the raw text we have (the string's content when the JSON was merely
  unfinished), whole, with the flag "unusable".
- Each index gets its own angle (a scene, a question, a slogan...), so the posts of one product differ.
- A channel (朋友圈 / 微博 / 小红书, marketing/channels.py) gives the request its length limit when none is given, its
  style and hashtag/emoji/line rules in the prompt, and the checks of those rules. A request without a channel
  (built directly, not from the form or a batch row) is checked for length and forbidden words only.
- Near-duplicates: the posts of one request are one set. Once they are all back, each post (in order) that is
  a near-duplicate of an earlier one (rules.near_duplicate) is regenerated with the tries it has left of
  `max_attempts`, the retry saying which post it repeats; one still a duplicate after them, or with no try
  left, is returned flagged "duplicate_of:N~similarity", never kept silently. A card's regeneration is compared
  with the other cards of its request. A post whose answer never parsed is flagged already and not compared.
- A gateway failure (`ChatError`) propagates: the chat shows its `user_text`, a batch counts the row as failed.
  It is not retried here (the client already retries once before the first byte).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ernie_ops.client.gateway import ChatError
from ernie_ops.errors import ErnieOpsError
from ernie_ops.marketing import channels
from ernie_ops.marketing.batch_io import Product
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.rules import PostsFormatError, Problem, Rules, check, count_chars, near_duplicate, parse_posts

POSTS_RANGE = (1, 10)
MAX_CHARS_RANGE = (5, 2000)
MAX_FIELD_CHARS = 1000  # a form field longer than this is refused: it would crowd the prompt out
UNUSABLE_FLAG = "unusable"
# A writer's requests at once: below httpx's default pool of 100 connections (GatewayClient's), since a request
# waiting longer than the pool timeout for a connection fails as a timeout. A batch of 8 rows x 20 posts would.
DEFAULT_MAX_IN_FLIGHT = 96

DEFAULT_SYSTEM_PROMPT = (
    "你是一名资深电商文案策划，文案简短、有画面感，不夸大、不使用绝对化用语（最、第一、国家级等）。\n"
    "You write short, vivid marketing posts with no absolute claims."
)

# The JSON asked for, described rather than shown: a literal example ({"posts": ["文案 / the post"]}) was copied
# verbatim by a small instruct model (SmolLM2-135M: every post of benchmarks/scenario_quality.py), and it passes
# every rule, so nothing regenerated it. The grammar (response_format) gives the shape; this names what goes in it.
ANSWER_FORMAT = (
    "只输出 JSON 对象：键 posts 的列表里放一条字符串，就是你为这个产品写的文案正文。"
    " / Answer only with a JSON object: its key posts holds a list of one string, the post you wrote for this product."
)

# One angle per post index (cycled), so the posts of one product are not N copies of the same idea.
ANGLES: tuple[tuple[str, str], ...] = (
    ("直接点出最打动人的卖点", "lead with the selling point that matters most"),
    ("描绘目标人群使用它的一个生活场景", "a scene from the audience's day with the product in it"),
    ("用一个问题开头，引起共鸣", "open with a question the audience asks themselves"),
    ("写使用后的感受和心情", "the feeling after using it"),
    ("像一句好记的口号", "a short, memorable slogan"),
    ("对比用之前和用之后", "before and after"),
    ("抓住一个具体的小细节", "one concrete small detail"),
    ("强调实用和省心", "practical value, less hassle"),
    ("作为送给别人的礼物", "as a gift for someone"),
    ("结尾号召马上行动", "end with a call to act now"),
)

FIELD_NAMES = {
    "product": "产品 product",
    "selling_points": "卖点 selling points",
    "audience": "目标人群 audience",
    "tone": "语气 tone",
    "posts": "条数 number of posts",
    "max_chars": "字数上限 max length",
    "channel": "渠道 channel",
}
DEFAULT_MAX_TOKENS = 256  # a request without a channel (the channels' own are in marketing/channels.py)


class FormError(ErnieOpsError):
    """The copy form has bad fields; `problems` maps each bad field to a sentence shown under its input."""

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        zh = "、".join(FIELD_NAMES.get(k, k).split(" ", 1)[0] for k in self.problems)
        en = ", ".join(FIELD_NAMES.get(k, k).split(" ", 1)[-1] for k in self.problems)
        n = len(self.problems)
        super().__init__(
            f"表单有 {n} 项需要修改（{zh}），见各项下方的说明。 / The form has {n} field(s) to fix ({en}); see the note under each."
        )


def _text(values: Mapping[str, object], name: str, problems: dict[str, str], *, required: bool = False) -> str:
    raw = values.get(name)
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raw = str(raw)
    text = raw.strip()
    if required and not text:
        problems[name] = f"请填写{FIELD_NAMES[name].split()[0]}。 / Enter the {FIELD_NAMES[name].split(' ', 1)[1]}."
    elif count_chars(text) > MAX_FIELD_CHARS:
        zh, en = FIELD_NAMES[name].split(" ", 1)
        problems[name] = f"{zh}不能超过 {MAX_FIELD_CHARS} 个字。 / The {en} must be at most {MAX_FIELD_CHARS} characters."
    return text


def _whole(values: Mapping[str, object], name: str, default: int, limits: tuple[int, int], problems: dict[str, str]) -> int:
    raw = values.get(name)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default
    number: int | None = None
    if isinstance(raw, bool):
        number = None
    elif isinstance(raw, int):
        number = raw
    elif isinstance(raw, float) and raw.is_integer():
        number = int(raw)
    elif isinstance(raw, str) and raw.strip().isascii() and raw.strip().lstrip("+-").isdigit():
        number = int(raw.strip())
    low, high = limits
    zh, en = FIELD_NAMES[name].split(" ", 1)
    if number is None or not low <= number <= high:
        problems[name] = (
            f"{zh}应是 {low} 到 {high} 之间的整数，收到 {str(raw).strip()!r}。"
            f" / The {en} must be a whole number from {low} to {high}, not {str(raw).strip()!r}."
        )
        return default
    return number


@dataclass(frozen=True)
class CopyRequest:
    """What one product's posts are generated from."""

    product: str
    selling_points: str
    audience: str
    tone: str = ""
    posts: int = 3
    max_chars: int = 60
    channel: str | None = None  # a name in channels.CHANNELS; None: length and forbidden words only

    @classmethod
    def from_form(cls, values: Mapping[str, object], cfg: MarketingConfig) -> CopyRequest:
        """The form's values (strings from a browser, or typed values); FormError listing every bad field."""
        problems: dict[str, str] = {}
        product = _text(values, "product", problems, required=True)
        selling_points = _text(values, "selling_points", problems)
        audience = _text(values, "audience", problems)
        tone = _text(values, "tone", problems)
        channel = _channel(values, cfg, problems)
        posts = _whole(values, "posts", cfg.posts, POSTS_RANGE, problems)
        max_chars = _whole(values, "max_chars", default_max_chars(cfg, channel), MAX_CHARS_RANGE, problems)
        if problems:
            raise FormError(problems)
        return cls(product, selling_points, audience, tone, posts, max_chars, channel)

    @classmethod
    def from_product(cls, product: Product, cfg: MarketingConfig) -> CopyRequest:
        """A batch row (already validated by batch_io); empty posts/max_chars/channel take the config's defaults
        (the length: the channel's, see `default_max_chars`)."""
        channel = channels.resolve(product.channel or cfg.channel) or channels.DEFAULT_CHANNEL
        return cls(
            product.product,
            product.selling_points,
            product.audience,
            product.tone,
            product.posts if product.posts is not None else cfg.posts,
            product.max_chars if product.max_chars is not None else default_max_chars(cfg, channel),
            channel,
        )


def default_max_chars(cfg: MarketingConfig, channel: str | None) -> int:
    """A post's limit when the form or the row gives none: chat.marketing.channel_max_chars for the channel,
    else chat.marketing.max_chars, else the channel's preset (60, the old default, without a channel)."""
    if channel is not None and channel in cfg.channel_max_chars:
        return cfg.channel_max_chars[channel]
    if cfg.max_chars is not None:
        return cfg.max_chars
    return channels.CHANNELS[channel].max_chars if channel is not None else 60


def _channel(values: Mapping[str, object], cfg: MarketingConfig, problems: dict[str, str]) -> str:
    raw = values.get("channel")
    text = "" if raw is None else str(raw).strip()
    if not text:
        return channels.resolve(cfg.channel) or channels.DEFAULT_CHANNEL
    found = channels.resolve(text)
    if found is None:
        problems["channel"] = (
            f"没有渠道 {text!r}，可选：{channels.names()}。 / There is no channel {text!r}; choose one of {channels.names()}."
        )
        return channels.resolve(cfg.channel) or channels.DEFAULT_CHANNEL
    return found


@dataclass
class Post:
    """One generated post: its text (never cut), its count, what it breaks, and the tries it took."""

    text: str
    chars: int
    problems: list[Problem] = field(default_factory=list)
    attempts: int = 1
    unusable: str | None = None  # why the model's answer never parsed (then `text` is the raw text we have)

    @property
    def flags(self) -> list[str]:
        return ([UNUSABLE_FLAG] if self.unusable else []) + [p.flag for p in self.problems]

    @property
    def ok(self) -> bool:
        return not self.unusable and not self.problems

    @property
    def first_try_ok(self) -> bool:
        return self.ok and self.attempts == 1


@dataclass
class WriterStats:
    """Counters for a summary: requests sent (tries), and of them regenerations (tries after the first)."""

    requests: int = 0
    regenerations: int = 0


# --- pure helpers: schema, messages, salvage -----------------------------------------------------------------


def posts_schema(n: int = 1) -> dict:
    """JSON schema of the answer {"posts": [n non-empty strings]}; deliberately without maxLength (see above)."""
    return {
        "type": "object",
        "properties": {"posts": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": n, "maxItems": n}},
        "required": ["posts"],
        "additionalProperties": False,
    }


def response_format(n: int = 1) -> dict:
    """vLLM's OpenAI-compatible structured output request field for `posts_schema(n)`."""
    return {"type": "json_schema", "json_schema": {"name": "marketing_posts", "schema": posts_schema(n)}}


def angle(index: int) -> tuple[str, str]:
    """The angle of post `index` (1-based), cycling through ANGLES."""
    return ANGLES[(index - 1) % len(ANGLES)]


def user_message(req: CopyRequest, index: int, rules: Rules) -> str:
    """The rules first (the same for every post of a batch on one channel: vLLM's prefix cache then serves that
    part of the prompt from the first request on), then this post's angle, then the product's facts."""
    zh_angle, en_angle = angle(index)
    lines = [
        "请为下面的产品写 1 条营销文案。 / Write 1 marketing post for the product below.",
        f"字数 / Length: 不超过 {rules.max_chars} 个字，每个汉字、标点、emoji、空格各算 1 个字。"
        f" / At most {rules.max_chars} characters; each CJK character, punctuation mark, emoji and space counts as 1.",
    ]
    if req.channel is not None:
        lines.extend(channels.CHANNELS[req.channel].prompt_lines())
    if rules.forbidden_words:
        lines.append(f"不要使用这些绝对化用语 / Do not use these absolute claims: {'、'.join(rules.forbidden_words)}")
    lines.append(ANSWER_FORMAT)
    lines.append(
        f"这是共 {req.posts} 条中的第 {index} 条，角度 / Post {index} of {req.posts}, angle: {zh_angle} / {en_angle}"
        "（与其他几条不同 / different from the others）"
    )
    lines.append(f"产品 / Product: {req.product}")
    if req.selling_points:
        lines.append(f"卖点 / Selling points: {req.selling_points}")
    if req.audience:
        lines.append(f"目标人群 / Audience: {req.audience}")
    if req.tone:
        lines.append(f"语气 / Tone: {req.tone}")
    return "\n".join(lines)


def retry_message(previous: Post) -> str:
    """What was wrong with the previous try, for the next one."""
    if previous.unusable:
        what = f"上一次的回答不是要求的 JSON（{previous.unusable}）。 / The previous answer was not the JSON asked for."
    else:
        reasons = []
        for p in previous.problems:
            if p.kind == "too_long":
                reasons.append(
                    f"太长：{p.count} 个字，上限 {p.limit} 个字，请写得更短"
                    f" / too long: {p.count} characters, limit {p.limit}: write it shorter"
                )
            elif p.kind == "forbidden":
                reasons.append(f"用了绝对化用语「{p.word}」，请换一种说法 / uses the absolute claim {p.word!r}: say it another way")
            elif p.kind == "duplicate":
                reasons.append(
                    f"和第 {p.similar_to} 条太像（相似度 {p.similarity:.0%}），请换一个说法和角度"
                    f" / too much like post {p.similar_to} ({p.similarity:.0%} alike): write it differently"
                )
            else:
                reasons.append(f"不符合渠道规则：{p.message} / breaks the channel's rule: {p.message}")
        what = f"上一条文案不合格：{'；'.join(reasons)}。 / The previous post breaks the rules."
    return what + "\n请重写这一条。 / Rewrite this post.\n" + ANSWER_FORMAT


def build_messages(
    system_prompt: str, req: CopyRequest, index: int, rules: Rules, previous: Post | None = None, previous_raw: str = ""
) -> list[dict]:
    """The chat messages of one try: system, the request, and for a regeneration the previous answer and what was wrong."""
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_message(req, index, rules)}]
    if previous is not None:
        shown = previous_raw if previous.unusable else json.dumps({"posts": [previous.text]}, ensure_ascii=False)
        messages.append({"role": "assistant", "content": shown[: 4 * rules.max_chars + 200]})  # the prompt only: the post is never cut
        messages.append({"role": "user", "content": retry_message(previous)})
    return messages


def salvage(raw: str) -> str:
    """The best text of an answer that did not parse: the first post's content when the JSON was merely
    unfinished (max_tokens reached inside the string), else the raw answer stripped. Never shortened."""
    return _salvage(raw)[0]


def _salvage(raw: str) -> tuple[str, bool]:
    """(text, whether it is a post's content rather than the raw answer)."""
    text = raw.strip()
    start = text.find('["')
    if text.startswith("{") and start != -1:
        body = text[start + 2 :]
        decoder = json.JSONDecoder()
        with contextlib.suppress(json.JSONDecodeError):  # a finished string followed by something else
            value, _ = decoder.raw_decode('"' + body)
            if isinstance(value, str) and value.strip():
                return value.strip(), True
        unfinished = _TRAILING_ESCAPE.sub("", body)  # an escape cut at the end (\\ or \\u12) is dropped, nothing else
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads('"' + unfinished + '"')
            if isinstance(value, str) and value.strip():
                return value.strip(), True
    return text, False


_TRAILING_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{0,3})?\Z")


def _rank(post: Post, salvaged: bool) -> tuple[int, int, int]:
    """Lower is better among failed tries: parsed, then a post's content salvaged from unfinished JSON, then fewer problems."""
    return (post.unusable is not None, post.unusable is not None and not salvaged, len(post.problems))


Complete = Callable[..., Awaitable[str]]


class CopyWriter:
    """Posts for a request through the gateway. `complete` defaults to `client.complete`; tests inject another
    (same signature: messages, max_tokens, temperature, stats=None, extra=None) to produce a fault on demand."""

    def __init__(
        self,
        client,
        cfg: MarketingConfig,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        complete: Complete | None = None,
        max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT,
    ):
        self.cfg = cfg
        # at most this many requests at once (see DEFAULT_MAX_IN_FLIGHT), None: no bound
        self._slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        self.system_prompt = system_prompt
        self.words = cfg.rules().forbidden_words
        self._complete: Complete = complete if complete is not None else client.complete
        self.stats = WriterStats()

    def rules(self, req: CopyRequest) -> Rules:
        if req.channel is not None:
            return channels.CHANNELS[req.channel].rules(req.max_chars, self.words)
        return Rules(max_chars=req.max_chars, forbidden_words=self.words)

    def max_tokens(self, req: CopyRequest) -> int:
        """chat.marketing.max_tokens when set, else the channel's (a 小红书 note needs more than a 朋友圈 post)."""
        if self.cfg.max_tokens is not None:
            return self.cfg.max_tokens
        return channels.CHANNELS[req.channel].max_tokens if req.channel is not None else DEFAULT_MAX_TOKENS

    async def _request(self, messages: list[dict], max_tokens: int, extra: dict | None) -> str:
        if self._slots is None:
            return await self._complete(messages, max_tokens, self.cfg.temperature, extra=extra)
        async with self._slots:
            return await self._complete(messages, max_tokens, self.cfg.temperature, extra=extra)

    async def post(self, req: CopyRequest, index: int, others: Sequence[str | None] = ()) -> Post:
        """Post `index` (1-based) of `req`, regenerated up to max_attempts tries while it fails a rule, does not
        parse, or is a near-duplicate of one of `others` (the set's other posts by index, None where there is none)."""
        return await self._tries(req, index, others, first=1)

    async def _tries(self, req: CopyRequest, index: int, others: Sequence[str | None], first: int, previous: Post | None = None) -> Post:
        """Tries `first`..max_attempts; `previous` (a failed earlier try) is what the first of them corrects."""
        rules = self.rules(req)
        max_tokens = self.max_tokens(req)
        extra = {"response_format": response_format(1)} if self.cfg.structured_output else None
        best: Post | None = previous
        best_rank: tuple[int, int, int] | None = _rank(previous, False) if previous is not None else None
        previous_raw = ""
        for attempt in range(first, self.cfg.max_attempts + 1):
            messages = build_messages(self.system_prompt, req, index, rules, previous, previous_raw)
            self.stats.requests += 1
            if attempt > 1:
                self.stats.regenerations += 1
            try:
                raw = await self._request(messages, max_tokens, extra)
            except ChatError as exc:
                # A correction shows the previous answer back; a long garbled one (a weak model's) can take the
                # prompt past the context (HTTP 400 too_long): this try is made fresh instead, without it.
                if exc.kind != "too_long" or previous is None:
                    raise
                raw = await self._request(build_messages(self.system_prompt, req, index, rules, None, ""), max_tokens, extra)
            try:
                text = parse_posts(raw, 1)[0].strip()
            except PostsFormatError as e:
                text, salvaged = _salvage(raw)
                candidate = Post(text, count_chars(text), check(text, rules) if text else [], attempt, unusable=str(e))
            else:
                salvaged = False
                candidate = Post(text, count_chars(text), _problems(text, rules, others), attempt)
            if candidate.ok:
                return candidate
            rank = _rank(candidate, salvaged)
            if best_rank is None or rank <= best_rank:  # on a tie the later try wins
                best, best_rank = candidate, rank
            previous, previous_raw = candidate, raw
        assert best is not None
        return replace(best, attempts=self.cfg.max_attempts)

    async def posts(self, req: CopyRequest) -> list[Post]:
        """The req.posts posts, requested concurrently, then near-duplicates regenerated in order (module
        docstring); a ChatError of one cancels the others and propagates."""
        tasks = [asyncio.ensure_future(self.post(req, i)) for i in range(1, req.posts + 1)]
        try:
            posts = list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for i, post in enumerate(posts):
            if post.unusable:
                continue
            earlier = [None if p.unusable else p.text for p in posts[:i]]
            duplicate = near_duplicate(post.text, earlier)
            if duplicate is None:
                continue
            flagged = replace(post, problems=[*post.problems, duplicate])
            if post.attempts < self.cfg.max_attempts:
                flagged = await self._tries(req, i + 1, earlier, first=post.attempts + 1, previous=flagged)
            else:
                flagged = replace(flagged, attempts=self.cfg.max_attempts)
            posts[i] = flagged
        return posts


def _problems(text: str, rules: Rules, others: Sequence[str | None]) -> list[Problem]:
    """The rules a parsed post breaks, and the post of the set it repeats if any."""
    problems = check(text, rules)
    duplicate = near_duplicate(text, others) if others else None
    return [*problems, duplicate] if duplicate is not None else problems
