"""marketing/channels.py: the channel presets (朋友圈, 微博, 小红书), their checks, their place in the prompt, the form,
the config, a batch file's channel column and `ernie-ops copy batch --channel`.

The generation test uses an INJECTED `complete` (as tests/unit/test_copy_generate.py does) that breaks a
channel's rule on its first try on demand, which a real model does only by chance."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from ernie_ops import cli, config
from ernie_ops.chat import cards
from ernie_ops.config import ConfigError
from ernie_ops.marketing import batch_io, channels
from ernie_ops.marketing.batch_io import Product
from ernie_ops.marketing.commands import batch_settings
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import CopyRequest, CopyWriter, FormError, Post, build_messages
from ernie_ops.marketing.rules import check, count_emoji, hashtags

MOMENTS, WEIBO, XHS = (channels.CHANNELS[n] for n in ("moments", "weibo", "xiaohongshu"))
GOOD = {
    "moments": "周一早上的地铁好挤，但手里这杯热茶还是烫的☕ 316不锈钢保温杯，12小时都暖暖的",
    "weibo": "早八人的续命神器来了！316不锈钢保温杯，12小时热水不断 #保温杯# #通勤好物#",
    "xiaohongshu": "打工人冬日续命杯☕\n每天早上装满热水，到下班还是烫的，316不锈钢内胆很放心。\n#保温杯 #通勤好物 #打工人",
}


def flags(text: str, channel: channels.Channel) -> list[str]:
    return [p.flag for p in check(text, channel.rules(forbidden_words=()))]


def test_the_presets_carry_the_platform_numbers():
    assert (MOMENTS.max_chars, MOMENTS.hashtags, MOMENTS.emoji) == (120, (0, 0), (1, 3))
    assert (WEIBO.max_chars, WEIBO.hashtags, WEIBO.line_breaks) == (140, (1, 2), False)
    assert (XHS.max_chars, XHS.hashtags, XHS.hashtags_at_end, XHS.title_max) == (1000, (3, 5), True, 20)
    assert channels.DEFAULT_CHANNEL == "moments"


@pytest.mark.parametrize("name", list(GOOD))
def test_a_post_written_for_its_channel_passes(name):
    assert flags(GOOD[name], channels.CHANNELS[name]) == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("moments", "热水暖一整天 #保温杯", ["hashtags:1/0-0"]),
        ("moments", "暖😀😀😀😀", ["emoji:4/3"]),
        ("moments", "好" * 121, ["too_long:121/120"]),
        ("weibo", "热水暖一整天", ["hashtags:0/1-2"]),
        ("weibo", "热水 #保温杯# #通勤# #冬天#", ["hashtags:3/1-2"]),
        ("weibo", "热水暖一整天\n#保温杯#", ["line_breaks:1/0"]),
        ("weibo", "热水暖一整天 ＃保温杯＃", []),  # a full-width ＃ is a hashtag too
        ("xiaohongshu", "只有一行 #a #b #c", ["title:missing"]),
        ("xiaohongshu", "这是一个写得远远超过二十个字上限的小红书笔记标题啊\n正文\n#a #b #c", ["title:25/20"]),
        ("xiaohongshu", "标题\n正文 #a #b #c 还在写正文", ["hashtags:not_at_end"]),
        ("xiaohongshu", "标题\n正文\n#a #b", ["hashtags:2/3-5"]),
    ],
)
def test_a_post_breaking_its_channel_is_flagged(name, text, expected):
    got = flags(text, channels.CHANNELS[name])
    assert got == expected


def test_emoji_and_hashtags_are_counted_as_a_person_sees_them():
    assert count_emoji("👨\u200d👩\u200d👧🇨🇳👍🏽☕️好") == 4
    assert hashtags("#保温杯# #通勤好物# 还有 #标签 #另一个") == ["#保温杯#", "#通勤好物#", "#标签", "#另一个"]


@pytest.mark.parametrize(
    ("text", "name"), [("朋友圈", "moments"), ("Weibo", "weibo"), ("小红书", "xiaohongshu"), (" WeChat  Moments ", "moments")]
)
def test_a_channel_is_named_as_people_name_it(text, name):
    assert channels.resolve(text) == name and channels.get(text).name == name


def test_an_unknown_channel_names_the_channels():
    assert channels.resolve("抖音") is None
    with pytest.raises(ValueError, match=r"moments \(朋友圈\), weibo \(微博\), xiaohongshu \(小红书\)"):
        channels.get("抖音")


# --- the prompt and generation --------------------------------------------------------------------------------


def prompt(channel: str | None) -> str:
    req = CopyRequest("保温杯", "保温12小时", "上班族", posts=1, max_chars=140, channel=channel)
    writer = CopyWriter(None, MarketingConfig(), "S", complete=lambda *a, **k: None)
    return build_messages("S", req, 1, writer.rules(req))[1]["content"]


def test_the_prompt_carries_the_channel_style_and_rules():
    weibo = prompt("weibo")
    assert "微博" in weibo and "#话题#" in weibo and "1-2" in weibo and "不要换行" in weibo and WEIBO.style_zh in weibo
    moments = prompt("moments")
    assert "朋友圈" in moments and "不要话题标签" in moments and MOMENTS.style_zh in moments
    xhs = prompt("xiaohongshu")
    assert "标题" in xhs and "不超过 20" in xhs and "#标签" in xhs and "文末" in xhs
    assert "Channel" not in prompt(None)  # a request without a channel: length and words only, as before


def test_a_post_breaking_its_channel_is_regenerated_with_the_reason():
    calls = []

    async def complete(messages, max_tokens, temperature, stats=None, extra=None):  # injected: no hashtag on the first try
        calls.append((messages, max_tokens))
        return json.dumps({"posts": ["热水暖一整天" if len(calls) == 1 else "热水暖一整天 #保温杯#"]}, ensure_ascii=False)

    writer = CopyWriter(None, MarketingConfig(), "S", complete=complete)
    post = asyncio.run(writer.post(CopyRequest("保温杯", "", "", posts=1, max_chars=140, channel="weibo"), 1))
    assert post.ok and post.attempts == 2 and post.text.endswith("#保温杯#")
    assert "the channel wants 1-2" in calls[1][0][-1]["content"]
    assert calls[0][1] == WEIBO.max_tokens


def test_max_tokens_come_from_the_channel_unless_configured():
    xhs = CopyRequest("杯", "", "", channel="xiaohongshu")
    assert CopyWriter(None, MarketingConfig(), "S", complete=print).max_tokens(xhs) == 1536
    assert CopyWriter(None, MarketingConfig(max_tokens=300), "S", complete=print).max_tokens(xhs) == 300
    assert CopyWriter(None, MarketingConfig(), "S", complete=print).max_tokens(CopyRequest("杯", "", "")) == 256


# --- the form, the config --------------------------------------------------------------------------------------


def test_the_form_takes_a_channel_and_its_limit():
    cfg = MarketingConfig()
    assert CopyRequest.from_form({"product": "杯"}, cfg).channel == "moments"
    assert CopyRequest.from_form({"product": "杯"}, cfg).max_chars == 120
    xhs = CopyRequest.from_form({"product": "杯", "channel": "小红书", "max_chars": ""}, cfg)
    assert (xhs.channel, xhs.max_chars) == ("xiaohongshu", 1000)
    assert CopyRequest.from_form({"product": "杯", "channel": "weibo", "max_chars": "100"}, cfg).max_chars == 100
    long_weibo = MarketingConfig(channel_max_chars={"微博": 2000})
    assert long_weibo.channel_max_chars == {"weibo": 2000}
    assert CopyRequest.from_form({"product": "杯", "channel": "weibo"}, long_weibo).max_chars == 2000


def test_an_unknown_channel_in_the_form_is_a_field_error():
    with pytest.raises(FormError) as info:
        CopyRequest.from_form({"product": "杯", "channel": "抖音", "posts": "0"}, MarketingConfig())
    assert set(info.value.problems) == {"channel", "posts"}
    assert "抖音" in info.value.problems["channel"] and "小红书" in info.value.problems["channel"]


def test_the_form_offers_the_channels_with_their_limits():
    props = cards.form_props(MarketingConfig())
    assert props["values"]["channel"] == "moments" and props["values"]["max_chars"] == ""
    assert [(c["name"], c["max_chars"]) for c in props["channels"]] == [("moments", 120), ("weibo", 140), ("xiaohongshu", 1000)]


@pytest.mark.parametrize(
    ("yaml", "needle"),
    [("channel: 抖音", "chat.marketing.channel"), ("channel_max_chars: {抖音: 100}", "抖音"), ("channel_max_chars: {weibo: 3}", "weibo")],
)
def test_a_bad_channel_in_config_is_refused(yaml, needle):
    with pytest.raises(ConfigError) as info:
        config.parse(f"chat:\n  marketing:\n    {yaml}\n")
    assert needle in str(info.value)


def test_config_accepts_a_channel_by_its_chinese_name():
    assert config.parse("chat:\n  marketing:\n    channel: 小红书\n").chat.marketing.channel == "xiaohongshu"


def test_a_card_says_what_channel_rule_and_duplicate_it_breaks():
    text = "热水 #保温杯# #通勤# #冬天#\n第 一"
    problems = check(text, WEIBO.rules())
    post = Post(text, 20, problems, 3)
    assert cards.flag_labels(post) == [
        "话题标签 3 个，应 1-2 / hashtags",
        "应写成一段，不换行 / one paragraph",
        "绝对化用语「第 一」/ forbidden word",
    ]


# --- the batch file and the CLI ---------------------------------------------------------------------------------


def test_a_batch_row_names_its_channel(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("产品,卖点,目标人群,渠道\n保温杯,保温,上班族,小红书\n水杯,轻,学生,\n雨伞,抗风,上班族,抖音\n", encoding="utf-8")
    read = batch_io.read_products(path)
    assert [(p.row, p.channel) for p in read.rows] == [(2, "xiaohongshu"), (3, "")]
    assert [p.row for p in read.problems] == [4] and "'抖音' is not one of" in read.problems[0].message
    cfg = MarketingConfig(channel="weibo")
    assert [CopyRequest.from_product(p, cfg).channel for p in read.rows] == ["xiaohongshu", "weibo"]
    assert [CopyRequest.from_product(p, cfg).max_chars for p in read.rows] == [1000, 140]


def test_a_row_without_a_channel_keeps_its_earlier_key():
    # the key of a row as computed before the channel column existed: a re-run after the upgrade skips it
    fields = ["保温杯", "保温", "上班族", "", None, None]
    earlier = hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    assert Product(2, "保温杯", "保温", "上班族").key == earlier
    assert Product(2, "保温杯", "保温", "上班族", channel="weibo").key != earlier


def test_the_cli_options_replace_the_config_defaults():
    marketing = MarketingConfig(channel_max_chars={"weibo": 2000})
    row = Product(2, "杯", "轻", "学生")

    def request(posts=None, max_chars=None, channel=None) -> CopyRequest:
        return CopyRequest.from_product(row, batch_settings(marketing, posts=posts, max_chars=max_chars, channel=channel))

    assert (request().channel, request().max_chars) == ("moments", 120)
    assert (request(channel="weibo").channel, request(channel="weibo").max_chars) == ("weibo", 2000)  # channel_max_chars
    assert (request(posts=2, max_chars=90, channel="weibo").posts, request(max_chars=90, channel="weibo").max_chars) == (2, 90)


def test_the_cli_refuses_an_unknown_channel(tmp_path, capsys):
    (tmp_path / "in.csv").write_text("product,selling_points,audience\n杯,轻,学生\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        cli.main(["copy", "batch", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--channel", "抖音"])
    err = " ".join(capsys.readouterr()[1].split())
    assert info.value.code == 2 and "channel '抖音' is not one of moments (朋友圈)" in err
