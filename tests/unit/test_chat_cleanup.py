"""Output clean-up on Chinese and English samples; the usual clean-up regexes shown failing first."""

from __future__ import annotations

import re

import pytest

from ernie_ops.chat.cleanup import INDENT, blocks, clean


def article_post_process(text: str) -> str:
    """The usual regex `post_process`, verbatim, to show what it breaks."""
    text = re.sub(r"\n\s*\n", "\n\n", text)
    text = re.sub(r"([，。！？；：])\s+", r"\1", text)
    if not text.startswith("  "):
        text = "  " + text
    return text


LIST_AFTER_COLON = "步骤如下：\n\n1. 打开设置。\n2. 点击保存。\n\n完成后重启。"
CODE = "示例：\n\n```python\ndef a():\n    return 1\n\n\ndef b():  # 注意， 这里\n    return 2\n```\n"
HARD_BREAK = "第一行。  \n第二行"


def test_the_articles_regexes_break_markdown():
    assert "步骤如下：1. 打开设置。2. 点击保存。完成后重启。" in article_post_process(LIST_AFTER_COLON)  # list and paragraphs merged
    assert "return 1\n\ndef b():  # 注意，这里" in article_post_process(CODE)  # code edited: blank line and comment
    assert article_post_process(HARD_BREAK) == "  第一行。第二行"  # hard break gone, lines merged


def test_lists_paragraphs_and_hard_breaks_survive():
    assert clean(LIST_AFTER_COLON) == LIST_AFTER_COLON
    assert clean(HARD_BREAK) == HARD_BREAK


def test_spaces_after_full_width_punctuation_go_in_prose_only():
    text = "你好， 世界！  今天天气不错。\t真的？ 是的： `a，  b` 保留。"
    assert clean(text) == "你好，世界！今天天气不错。真的？是的：`a，  b` 保留。"
    assert clean("（ 注意 ）「 引用 」《 书名 》【 标签 】") == "（注意 ）「引用 」《书名 》【标签 】"  # before a mark: not ours to judge
    assert clean("全角空格后也是：\u3000下一句") == "全角空格后也是：下一句"


def test_code_blocks_are_untouched():
    cleaned = clean(CODE)
    assert "```python\ndef a():\n    return 1\n\n\ndef b():  # 注意， 这里\n    return 2\n```" in cleaned
    tilde = "~~~\n第一，  第二\n\n\n\n~~~\n"
    assert clean(tilde) == tilde.rstrip("\n")
    indented = "说明：\n\n    x，  y\n\n\n\n    z\n\n\n\n结束。 好"
    assert clean(indented) == "说明：\n\n    x，  y\n\n\n\n    z\n\n结束。好"


def test_an_unclosed_fence_protects_everything_after_it():
    """A stopped or cut reply can end inside a code block."""
    text = "看代码：\n\n```\na，  b\n\n\n\nc"
    assert clean(text) == text


def test_longer_fence_and_backticks_in_info_string():
    text = "````md\n```\n不是结尾， 仍是代码\n```\n````\n后面， 是正文"
    assert clean(text) == "````md\n```\n不是结尾， 仍是代码\n```\n````\n后面，是正文"
    assert [is_code for is_code, _ in blocks("``` not`a fence\n\n\n\nx")] == [False]


def test_blank_lines_collapse_in_english_and_chinese():
    text = "\n\n  \nFirst paragraph.\n\n\n   \n\nSecond,   spaced   words stay.\n \t\n\n第三段。\n\n\n"
    assert clean(text) == "First paragraph.\n\nSecond,   spaced   words stay.\n\n第三段。"


def test_english_text_and_ascii_punctuation_are_left_alone():
    text = "Hello, world! Is this fine? Yes: it is.\n\n- item one\n- item two\n\n> quote,  here\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    assert clean(text) == text


def test_leading_space_of_a_reply_goes_but_not_an_indented_code_block():
    assert clean(" The answer.\n\n Second.") == "The answer.\n\n Second."
    assert clean("\n\n    code()\n") == "    code()"


def test_crlf_is_normalised():
    assert clean("a\r\n\r\n\r\nb\rc") == "a\n\nb\nc"


def test_cjk_indent_is_opt_in_and_never_touches_markdown():
    text = "第一段。\n\n第二段，继续。\n\n- 列表项\n\n# 标题\n\nEnglish paragraph.\n\n```\n代码\n```\n\n    缩进代码"
    assert clean(text) == text  # off by default
    out = clean(text, indent_cjk_paragraphs=True)
    assert out.startswith(f"{INDENT}第一段。\n\n{INDENT}第二段，继续。\n\n- 列表项\n\n# 标题\n\nEnglish paragraph.\n\n```\n代码\n```")
    assert out.endswith("\n\n    缩进代码")


@pytest.mark.parametrize("sample", [LIST_AFTER_COLON, CODE, HARD_BREAK, "a\n\n\n\nb， c", "```\nx\n\n\n", "    code\n\n\n\n    more"])
def test_clean_is_idempotent(sample):
    once = clean(sample, indent_cjk_paragraphs=True)
    assert clean(once, indent_cjk_paragraphs=True) == once
