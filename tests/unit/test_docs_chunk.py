"""Sentence ends in Chinese and English, and the size / overlap / offset / section invariants of passages."""

from __future__ import annotations

import itertools
import random

import pytest

from ernie_ops.docs.chunk import DEFAULT_OVERLAP, DEFAULT_SIZE, chunk, split_sentences
from ernie_ops.docs.model import Section


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


# --- sentence ends ---------------------------------------------------------------------------------------------


def test_chinese_end_marks_end_sentences():
    assert sentences("年假怎么申请？请登录系统。太好了！第一步；第二步") == [
        "年假怎么申请？",
        "请登录系统。",
        "太好了！",
        "第一步；",
        "第二步",
    ]


def test_chinese_closing_quotes_and_brackets_stay_with_the_sentence():
    assert sentences("他说：“明天上线。”随后离开。「完成了！」（见附录。）好") == [
        "他说：“明天上线。”",
        "随后离开。",
        "「完成了！」",
        "（见附录。）",
        "好",
    ]


def test_ellipsis_ends_a_sentence_in_both_scripts():
    assert sentences("等一下……我看看。Wait... ok then…next") == ["等一下……", "我看看。", "Wait...", "ok then…", "next"]


def test_english_period_ends_a_sentence_only_before_whitespace_or_the_end():
    text = "Pi is 3.14 here. Release v1.2.3 ships site.yml today. Done."
    assert sentences(text) == ["Pi is 3.14 here.", "Release v1.2.3 ships site.yml today.", "Done."]


def test_abbreviations_do_not_end_a_sentence():
    text = "Use a port, e.g. 8000, or i.e. the default. Mr. Smith agreed vs. the rest. Next"
    assert sentences(text) == ["Use a port, e.g. 8000, or i.e. the default.", "Mr. Smith agreed vs. the rest.", "Next"]


def test_question_and_exclamation_marks_and_closing_quotes():
    assert sentences('Is it up? Yes! He said "it works." Really?! ok') == ["Is it up?", "Yes!", 'He said "it works."', "Really?!", "ok"]


def test_ascii_marks_inside_a_word_end_nothing():
    assert sentences("Call f(a?b:c) or x!=y now") == ["Call f(a?b:c) or x!=y now"]


def test_a_period_after_a_long_word_or_a_long_chinese_run_ends_a_sentence():
    long_word = "a-very-long-identifier-name-with-no-spaces-at-all"
    run = "这是一段很长的中文内容中间没有任何空格也没有中文句号只有一个英文句点在最后"
    assert sentences(f"Call {long_word}. Next {run}. 下一句") == [f"Call {long_word}.", f"Next {run}.", "下一句"]


def test_numbered_list_items_are_not_cut_after_the_number():
    assert sentences("Steps:\n1. Install it.\n  2. Run it.\nThere are 2. Done") == [
        "Steps:",
        "1. Install it.",
        "2. Run it.",
        "There are 2.",
        "Done",
    ]


def test_newlines_end_sentences_and_whitespace_is_excluded():
    text = "  第一行没有句号\n\n\t second line  \r\n第三行。  "
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == ["第一行没有句号", "second line", "第三行。"]
    assert spans[0] == (2, 9)


def test_mixed_scripts():
    assert sentences("VPN 配置见 site.yml。Then restart nginx. 完成！") == ["VPN 配置见 site.yml。", "Then restart nginx.", "完成！"]


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n", "\u3000 \n"])
def test_blank_text_has_no_sentences(text):
    assert split_sentences(text) == []


# --- passages --------------------------------------------------------------------------------------------------

_WORDS = ["年假", "申请", "VPN", "配置", "site.yml", "v1.2.3", "3.14", "e.g.", "部署", "the", "server", "k8s", "升级", "端口", "8000"]
_ENDS = ["。", "！", "？", "；", ". ", "! ", "? ", "\n", "\n\n", "…", '." ', "。」", " "]


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 60)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 12))]
        parts.append(rng.choice(["", " "]).join(words) + rng.choice(_ENDS))
        if rng.random() < 0.05:
            parts.append("x" * rng.randint(50, 300))  # a 'sentence' with no place to cut
        if rng.random() < 0.05:
            parts.append(" ".join(["word"] * rng.randint(20, 80)))  # a long sentence cut at spaces
    return "".join(parts)


def check_invariants(sections: list[Section], size: int, overlap: int) -> None:
    chunks = chunk(sections, size, overlap)
    for c in chunks:
        text = sections[c.section].text
        assert text[c.start : c.end] == c.text
        assert c.text == c.text.strip() and c.text
        assert len(c.text) <= size
        assert (c.page, c.heading) == (sections[c.section].page, sections[c.section].heading)
    assert [c.section for c in chunks] == sorted(c.section for c in chunks)
    for a, b in itertools.pairwise(chunks):
        if a.section == b.section:
            assert b.start > a.start and b.end > a.end  # progress, no passage repeated
            assert b.start >= a.end or a.end - b.start <= overlap  # shared text is at most `overlap`
    # Nothing lost: every non-space character of every section is in some passage of that section.
    for index, section in enumerate(sections):
        covered = set()
        for c in chunks:
            if c.section == index:
                covered.update(range(c.start, c.end))
        assert all(i in covered for i, ch in enumerate(section.text) if not ch.isspace())


def test_random_texts_keep_size_offsets_overlap_and_lose_nothing():
    rng = random.Random(20261202)
    for _ in range(300):
        sections = [Section(random_text(rng), page=rng.choice([None, 1, 2])) for _ in range(rng.randint(1, 4))]
        size = rng.randint(20, 500)
        check_invariants(sections, size, rng.randint(0, size - 1))


def test_passages_are_whole_sentences_when_sentences_fit():
    text = "".join(f"第{i}句话说明部署步骤。" if i % 2 else f"Sentence {i} explains the upgrade. " for i in range(40))
    spans = split_sentences(text)
    starts, ends = {s for s, _ in spans}, {e for _, e in spans}
    chunks = chunk([Section(text)], 120, 40)
    assert len(chunks) > 5
    assert all(c.start in starts and c.end in ends for c in chunks)


def test_overlap_is_the_trailing_whole_sentences_that_fit():
    text = "".join(f"这是第{i:02d}句，共十个字。" for i in range(10))  # 12 characters per sentence
    a, b = chunk([Section(text)], 50, 30)[:2]
    assert a.text == text[:48]  # four sentences
    assert b.start == 24 and b.text.startswith("这是第02句")  # the last two sentences (24 characters <= 30) again


def test_no_overlap_when_zero():
    text = "一二三四五。" * 20
    chunks = chunk([Section(text)], 30, 0)
    assert all(b.start == a.end for a, b in itertools.pairwise(chunks))
    assert "".join(c.text for c in chunks) == text


def test_a_long_sentence_is_cut_at_the_last_space_or_punctuation_before_size():
    text = "alpha beta gamma delta epsilon，zeta eta theta"
    chunks = chunk([Section(text)], 20, 0)
    assert [c.text for c in chunks] == ["alpha beta gamma", "delta epsilon，zeta", "eta theta"]


def test_a_long_sentence_without_a_cut_point_is_cut_hard_at_size():
    text = "无" * 25
    assert [(c.start, c.end) for c in chunk([Section(text)], 10, 0)] == [(0, 10), (10, 20), (20, 25)]


def test_a_passage_never_spans_two_sections():
    sections = [Section("第一页的内容。", page=1), Section("Page two text.", page=2), Section("升级步骤。", heading=("部署", "升级"))]
    chunks = chunk(sections, 400, 80)
    assert [(c.text, c.section, c.page, c.heading) for c in chunks] == [
        ("第一页的内容。", 0, 1, ()),
        ("Page two text.", 1, 2, ()),
        ("升级步骤。", 2, None, ("部署", "升级")),
    ]
    assert chunks[2].where == "部署 > 升级" and chunks[0].where == "p. 1"


def test_whitespace_only_sections_give_no_passages():
    assert chunk([Section("   \n\n \t "), Section("")], 100, 10) == []


def test_defaults_are_used_and_sane():
    assert 0 <= DEFAULT_OVERLAP < DEFAULT_SIZE
    text = "这是一个句子。" * 200
    chunks = chunk([Section(text)])
    assert max(len(c.text) for c in chunks) <= DEFAULT_SIZE
    assert len(chunks[0].text) > DEFAULT_SIZE - 7


@pytest.mark.parametrize(
    ("size", "overlap", "says"),
    [
        (0, 0, "size"),
        (-5, 0, "size"),
        (True, 0, "size"),
        (10.5, 0, "size"),
        (100, 100, "overlap"),
        (100, -1, "overlap"),
        (100, 1.5, "overlap"),
    ],
)
def test_bad_size_or_overlap_is_refused_with_a_sentence(size, overlap, says):
    with pytest.raises(ValueError, match=f"chunk {says} must be"):
        chunk([Section("text.")], size, overlap)
