"""What the chat's custom elements show, as plain data (no Chainlit here, so unit tests run without it).

Each function returns the `props` of one element in ernie_ops/chat_app/elements/: CopyForm (the form and its
errors), CopyPost (one post's card), and the text of a batch's report. The JSX only renders these.
A card also carries the request it was written from (its validated values, `request`, never rendered), so a
resumed thread's cards can be rewritten: `stored_cards` turns a thread's stored elements back into them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ernie_ops.marketing import channels
from ernie_ops.marketing.batch import BatchSummary
from ernie_ops.marketing.batch_io import Read
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import CopyRequest, FormError, Post, default_max_chars

FORM_FIELDS = ("product", "selling_points", "audience", "tone", "channel", "posts", "max_chars")
SHOWN_ROW_PROBLEMS = 20  # a report lists this many skipped rows, then says how many more


def form_props(cfg: MarketingConfig, values: Mapping | None = None, errors: Mapping | None = None, failure: str | None = None) -> dict:
    """The form with the user's values kept (defaults for the channel and the number fields), each error under
    its field, and the channels to choose from with the limit each gives when max_chars is left empty."""
    max_chars = cfg.max_chars if cfg.max_chars is not None and not cfg.channel_max_chars else ""
    shown = {
        "product": "",
        "selling_points": "",
        "audience": "",
        "tone": "",
        "channel": cfg.channel,
        "posts": cfg.posts,
        "max_chars": max_chars,
    }
    for name in FORM_FIELDS:
        if values and values.get(name) not in (None, ""):
            shown[name] = str(values[name])
    options = [{"name": c.name, "label": c.label, "max_chars": default_max_chars(cfg, c.name)} for c in channels.CHANNELS.values()]
    return {"values": shown, "errors": dict(errors or {}), "failure": failure, "channels": options}


def flag_labels(post: Post) -> list[str]:
    """What a flagged card says it breaks, short enough for a badge."""
    labels = ["模型输出无法解析 / unusable output"] if post.unusable else []
    for p in post.problems:
        if p.kind == "too_long":
            labels.append(f"超长 {p.count}/{p.limit} 字 / too long")
        elif p.kind == "forbidden":
            shown = p.written if p.written and p.written != p.word else p.word
            labels.append(f"绝对化用语「{shown}」/ forbidden word")
        elif p.kind == "duplicate":
            labels.append(f"与第 {p.similar_to} 条雷同 {p.similarity:.0%} / near-duplicate of post {p.similar_to}")
        elif p.kind == "hashtags":
            labels.append(
                f"话题标签 {p.count} 个，应 {p.low}-{p.limit} / hashtags"
                if p.count is not None
                else "话题标签应放文末 / hashtags at the end"
            )
        elif p.kind == "emoji":
            labels.append(f"emoji {p.count} 个，上限 {p.limit} / too many emoji")
        elif p.kind == "line_breaks":
            labels.append("应写成一段，不换行 / one paragraph")
        elif p.kind == "title":
            labels.append(f"标题 {p.count}/{p.limit} 字 / title too long" if p.count is not None else "缺少标题行 / no title line")
        else:
            labels.append(p.flag)
    return labels


def post_props(post: Post, card: str, index: int, max_chars: int, request: CopyRequest | None = None) -> dict:
    """One card: the text as written (never cut), its count against the limit, the rules it breaks; with
    `request`, the values it was written from (`request_values`), which a resumed thread rewrites it from."""
    props = {
        "card": card,
        "index": index,
        "text": post.text,
        "chars": post.chars,
        "max_chars": max_chars,
        "flags": flag_labels(post),
        "attempts": post.attempts,
    }
    if request is not None:
        props["request"] = request_values(request)
    return props


def request_values(request: CopyRequest) -> dict:
    """A request as plain values (JSON, stored with its cards); `CopyRequest.from_form` reads them back."""
    return dataclasses.asdict(request)


class StoredCard(NamedTuple):
    """A card of a resumed thread: its stored element dict (props as last updated), its request, its index."""

    element: dict
    request: CopyRequest
    index: int


def stored_cards(elements: Iterable[Mapping[str, Any]], cfg: MarketingConfig) -> dict[str, StoredCard]:
    """A resumed thread's CopyPost cards that can be rewritten, by card id.

    The cards of one generation (one message, `forId`, and the same stored values) share one CopyRequest
    object, as they did when generated: a rewrite compares a card with its siblings only. Each request is
    validated again with the current config, so one it refuses now (a channel that no longer exists, a number
    out of range) leaves its cards out: 重写 on them says the card is stale, as for any card not listed here.
    Cards stored before cards carried their request (no `request` prop) are left out the same way."""
    requests: dict[tuple[str, str], CopyRequest | None] = {}
    found: dict[str, StoredCard] = {}
    for e in elements:
        props = e.get("props")
        if e.get("name") != "CopyPost" or not e.get("id") or not isinstance(props, Mapping):
            continue
        values, card, index = props.get("request"), props.get("card"), props.get("index")
        if not isinstance(values, Mapping) or not card or isinstance(index, bool) or not isinstance(index, int):
            continue
        key = (str(e.get("forId") or ""), json.dumps(values, sort_keys=True, ensure_ascii=False, default=str))
        if key not in requests:
            try:
                requests[key] = CopyRequest.from_form(values, cfg)
            except FormError:
                requests[key] = None
        request = requests[key]
        if request is not None and 1 <= index <= request.posts:
            found[str(card)] = StoredCard(dict(e), request, index)
    return found


def batch_report(name: str, read: Read, summary: BatchSummary) -> str:
    """The message under a finished batch: counts, how to continue, and the skipped rows by number."""
    failed = len(summary.failed_rows) + summary.not_attempted
    lines = [
        f"**{name}**：{summary.generated} 行已生成，{read.bad_rows} 行格式有误已跳过，{failed} 行生成失败；"
        f"共 {summary.posts} 条文案，{summary.posts_flagged} 条标记未通过规则。 / "
        f"{summary.generated} rows generated, {read.bad_rows} skipped as malformed, {failed} failed; "
        f"{summary.posts} posts, {summary.posts_flagged} flagged.",
    ]
    if failed:
        lines.append("模型服务出错的行没有文案，稍后可只上传这些行再试。 / Rows that failed have no posts: upload them again later.")
    for problem in read.problems[:SHOWN_ROW_PROBLEMS]:
        lines.append(f"- 第 {problem.row} 行 / row {problem.row}: {problem.message}")
    if read.bad_rows > SHOWN_ROW_PROBLEMS:
        lines.append(f"- … 另有 {read.bad_rows - SHOWN_ROW_PROBLEMS} 行 / {read.bad_rows - SHOWN_ROW_PROBLEMS} more rows")
    return "\n".join(lines)
