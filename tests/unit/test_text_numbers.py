"""Numbers and month names as written in Chinese and English text (ernie_ops.text_numbers), the reader shared by
docs/agree and onboarding/welcome_check: pure functions."""

from __future__ import annotations

import re

import pytest

from ernie_ops.text_numbers import (
    EN_NUMBER_WORDS,
    MONTH_NAMES_PATTERN,
    MONTHS,
    ZH_NUMERALS_ALL,
    en_number,
    month_number,
    written_int,
    zh_number,
)


@pytest.mark.parametrize(
    ("numeral", "value"),
    [("五", 5), ("十", 10), ("十五", 15), ("十二", 12), ("二十", 20), ("二十五", 25), ("两", 2), ("三千", 3000),
     ("五万", 50_000), ("一万五千", 15_000), ("一百零五", 105), ("两万三千", 23000), ("二〇二六", 2026),
     ("一点五", 1.5), ("一亿", 100_000_000), ("廿五", 25), ("卅", 30), ("壹万贰仟", 12_000), ("叁拾伍", 35),
     ("一亿五千万", 150_000_000), ("三千万", 30_000_000), ("一万亿", 10**12), ("一亿零五万", 100_050_000), ("两万万", 200_000_000)],
)  # fmt: skip
def test_chinese_numerals_have_their_value(numeral, value):
    assert zh_number(numeral) == value


@pytest.mark.parametrize("text", ["研发", "", "12", "五点", "一点五点六", "五个"])
def test_what_is_no_chinese_numeral_has_no_value(text):
    assert zh_number(text) is None


def test_a_very_long_run_of_digits_is_infinite_not_an_error():
    assert zh_number("九" * 400) == float("inf")


def test_every_numeral_character_has_a_value():
    assert all(zh_number(c) is not None for c in ZH_NUMERALS_ALL)


@pytest.mark.parametrize(
    ("text", "value"),
    [("12", 12), (" 05 ", 5), ("十二", 12), ("二〇二六", 2026), ("廿五", 25), ("〇", 0), (None, None), ("一点五", None),
     ("研发", None), ("12a", None)],
)  # fmt: skip
def test_a_whole_number_in_digits_or_chinese(text, value):
    assert written_int(text) == value


@pytest.mark.parametrize(
    ("words", "value"), [("zero", 0), ("five", 5), ("nineteen", 19), ("forty", 40), ("twenty-one", 21), ("ninety nine", 99)]
)
def test_english_number_words_have_their_value(words, value):
    assert en_number(words) == value


def test_english_number_words_cover_zero_to_nineteen_and_the_tens():
    assert sorted(EN_NUMBER_WORDS.values()) == [*range(20), *range(20, 100, 10)]


@pytest.mark.parametrize(
    ("text", "month"),
    [("january", 1), ("January", 1), ("jan", 1), ("Feb.", 2), ("may", 5), ("sep", 9), ("sept", 9), ("SEPTEMBER", 9),
     ("dec", 12), ("12", 12), ("十二", 12), ("三", 3), ("13", 13), ("十三", 13), ("maybe", None), ("", None), (None, None)],
)  # fmt: skip
def test_a_month_from_its_name_or_number(text, month):
    assert month_number(text) == month


def test_the_month_pattern_takes_the_whole_name():
    pattern = re.compile(rf"\b(?:{MONTH_NAMES_PATTERN})")
    for name in MONTHS:
        assert pattern.match(name + " 5")[0] == name
    assert len(MONTHS) == 12 + 11 + 1  # full names, 3 letters (may is both), sept
