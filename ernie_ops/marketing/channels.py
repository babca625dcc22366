"""Where a post is published (渠道): each channel's length, hashtag, emoji, line-break and style rules.

A channel's rules do two things: they are told to the model in the prompt (marketing/generate.py), and the post is
checked against them (`Channel.rules` -> marketing/rules.py `check`), so a post that breaks one is regenerated and
then flagged, as a post too long or with a forbidden word is. What is checked, and why that much:
- the length (max_chars), counted as a person counts (rules.count_chars);
- the number of hashtags, both bounds: a tag is structure the channel expects (Weibo's #话题# joins a topic
  page, Xiaohongshu's #标签 make a note findable) or does not use (Moments has no hashtags: a # reads as noise);
  on Xiaohongshu the tags go at the end, after the text;
- emoji: the maximum only. The prompt asks for the preset's range, but a post without emoji is not wrong,
  one with a dozen is, and a regeneration costs a request;
- line breaks where the channel shows a post as one block (Weibo), and Xiaohongshu's title line.

The numbers and why each (朋友圈 120, 微博 140, 小红书 1000 with a 20-character title; max_tokens about twice the
characters): docs/design/marketing-rules.md#the-channels-numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ernie_ops.marketing.rules import DEFAULT_FORBIDDEN_WORDS, Rules


@dataclass(frozen=True)
class Channel:
    """One channel's preset. hashtags/emoji: (fewest, most); title_max: the first line is a title of at most
    this many characters (None: no title line)."""

    name: str  # what config, the form and a batch file's channel column say (aliases accepted)
    label: str
    aliases: tuple[str, ...]
    max_chars: int
    max_tokens: int
    hashtags: tuple[int, int]
    hashtag_form: str  # how a tag is written, for the prompt
    hashtags_at_end: bool
    emoji: tuple[int, int]
    line_breaks: bool
    title_max: int | None
    style_zh: str
    style_en: str

    def rules(self, max_chars: int | None = None, forbidden_words: tuple[str, ...] = DEFAULT_FORBIDDEN_WORDS) -> Rules:
        """The checks a post for this channel must pass; `max_chars` replaces the preset's length."""
        return Rules(
            max_chars=max_chars if max_chars is not None else self.max_chars,
            forbidden_words=forbidden_words,
            hashtags=self.hashtags,
            hashtags_at_end=self.hashtags_at_end,
            max_emoji=self.emoji[1],
            line_breaks=self.line_breaks,
            title_max=self.title_max,
        )

    def prompt_lines(self) -> list[str]:
        """What the prompt tells the model about this channel (its length is told with the rules)."""
        low, high = self.hashtags
        if high == 0:
            tags = "不要话题标签（#） / no hashtags (#)"
        else:
            where = "，放在文末" if self.hashtags_at_end else ""
            where_en = ", at the end" if self.hashtags_at_end else ""
            tags = f"{low}-{high} 个话题标签，写成 {self.hashtag_form}{where} / {low}-{high} hashtags written {self.hashtag_form}{where_en}"
        lines = [
            f"发布渠道 / Channel: {self.label}",
            f"风格 / Style: {self.style_zh} / {self.style_en}",
            f"话题 / Hashtags: {tags}",
            f"表情 / Emoji: {self.emoji[0]}-{self.emoji[1]} 个 emoji / {self.emoji[0]}-{self.emoji[1]} emoji",
        ]
        if not self.line_breaks:
            lines.append("不要换行，写成一段 / no line breaks: one paragraph")
        if self.title_max is not None:
            lines.append(
                f"开头一行写标题（不超过 {self.title_max} 个字），换行后写正文"  # not 第一行: 第一 is a forbidden word
                f" / The first line is a title of at most {self.title_max} characters, then the text on the next lines"
            )
        return lines


CHANNELS: dict[str, Channel] = {
    c.name: c
    for c in (
        Channel(
            name="moments",
            label="朋友圈 WeChat Moments",
            aliases=("朋友圈", "微信朋友圈", "wechat", "wechat moments"),
            max_chars=120,
            max_tokens=256,
            hashtags=(0, 0),
            hashtag_form="",
            hashtags_at_end=False,
            emoji=(1, 3),
            line_breaks=True,
            title_max=None,
            style_zh="像朋友之间分享，口语、真诚、简短，不像广告",
            style_en="like sharing with friends: conversational, sincere, short, not like an ad",
        ),
        Channel(
            name="weibo",
            label="微博 Weibo",
            aliases=("微博", "新浪微博"),
            max_chars=140,
            max_tokens=320,
            hashtags=(1, 2),
            hashtag_form="#话题#",
            hashtags_at_end=False,
            emoji=(0, 3),
            line_breaks=False,
            title_max=None,
            style_zh="开门见山、有话题感，适合转发评论",
            style_en="to the point and topical, made to be shared and commented on",
        ),
        Channel(
            name="xiaohongshu",
            label="小红书 Xiaohongshu",
            aliases=("小红书", "红书", "xhs", "rednote"),
            max_chars=1000,
            max_tokens=1536,
            hashtags=(3, 5),
            hashtag_form="#标签",
            hashtags_at_end=True,
            emoji=(1, 10),
            line_breaks=True,
            title_max=20,
            style_zh="真实体验分享的笔记：吸引人的标题，分段写亲身感受和实用细节，正文 300-600 字",
            style_en="a note sharing a real experience: a catchy title, short paragraphs of feelings and practical details,"
            " 300-600 characters",
        ),
    )
}
DEFAULT_CHANNEL = "moments"


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


_BY_ALIAS = {_key(alias): c.name for c in CHANNELS.values() for alias in (c.name, *c.aliases)}


def names() -> str:
    """The channels as a user may write them, for messages."""
    return ", ".join(f"{c.name} ({c.aliases[0]})" for c in CHANNELS.values())


def resolve(text: str) -> str | None:
    """The channel's name for a name or alias (朋友圈 -> moments), None when there is no such channel."""
    return _BY_ALIAS.get(_key(text or ""))


def get(name: str) -> Channel:
    """The preset of a name or alias; ValueError naming the channels when there is none."""
    found = resolve(name)
    if found is None:
        raise ValueError(f"unknown channel {name!r}; the channels are {names()}")
    return CHANNELS[found]
