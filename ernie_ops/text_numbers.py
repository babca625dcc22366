"""Numbers and month names as people write them in Chinese and English text: the values, and the words to look for.

One reader for every module that checks what a text says (docs/agree for citations, onboarding/welcome_check for
the welcome). Pure functions; no module rules here: which numerals count as a number (一 as an article, 十分 as an
adverb), measure words, units and the date patterns themselves stay with the caller, which finds the text and asks
here what it is worth.

Chinese numerals are read with unicodedata (五, 万, 廿, 壹, 拾 ... are numeric characters; 两 is not and is added):
五 5, 十二 12, 二十五 25, 廿五 25, 两万三千 23000, 一亿五千万 150000000, 一百零五 105, 一点五 1.5, and a run of
digits only is read digit by digit (二〇二六 2026). No library for this is in the package index (no cn2an).
"""

from __future__ import annotations

import re
import unicodedata

ZH_NUMERALS = "〇零一二两三四五六七八九十百千万亿"  # the numerals of everyday text
ZH_NUMERALS_ALL = ZH_NUMERALS + "廿卅壹贰叁肆伍陆柒捌玖拾佰仟"  # and the written-out (financial) forms, 廿 20, 卅 30

_TENS = (20, 30, 40)  # 廿 卅 卌: a tens digit in one character
_BIG = 10_000  # 万 and above: a unit that multiplies the numerals written before it (一万五千, 三千万)

_EN_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
_EN_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
EN_NUMBER_WORDS = {w: i for i, w in enumerate([*_EN_ONES.split(" "), "eighteen", "nineteen"])} | _EN_TENS
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}

_MONTH_FULL_NAMES = "january february march april may june july august september october november december"
MONTHS = {m: i for i, m in enumerate(_MONTH_FULL_NAMES.split(" "), 1)}
MONTHS |= {m[:3]: i for m, i in list(MONTHS.items()) if m != "may"} | {"sept": 9}  # jan ... dec, sept
MONTH_NAMES_PATTERN = "|".join(sorted(MONTHS, key=len, reverse=True))  # regex alternation, longest first (sept, sep)


def _char_value(c: str) -> int | None:
    """One Chinese numeral character's value (五 5, 〇 0, 廿 20, 壹 1, 万 10000), None for any other character."""
    if c == "两":
        return 2
    if unicodedata.category(c) not in ("Lo", "Nl"):  # 〇 is a letter number; Arabic digits (Nd) are not numerals here
        return None
    value = unicodedata.numeric(c, None)
    return int(value) if value is not None and value.is_integer() else None


def _positional(values: list[int]) -> int:
    """The value of numerals written with units: 一百零五 105, 两万三千 23000, 一亿五千万 150000000, 一万亿 10**12."""
    total, section, digit, biggest = 0, 0, 0, 0
    for v in values:
        if v < 10:
            digit = v
        elif v in _TENS:
            section += v
        elif v < _BIG:
            section += (digit or 1) * v
            digit = 0
        else:
            if v >= biggest:  # 一万亿, 两万万: a unit as big as any before multiplies all before it
                total, biggest = (total + section + digit) * v, v
            else:  # 一亿五千万: 万 multiplies only the 五千 since the 亿
                total += (section + digit) * v
            section = digit = 0
    return total + section + digit


def zh_number(numeral: str) -> float | None:
    """The value of a Chinese numeral (module docstring), with a decimal part after 点 (一点五 1.5); None when
    `numeral` holds anything else (研发, 12, 五点 without the decimals)."""
    whole, point, fraction = numeral.partition("点")
    values = [_char_value(c) for c in whole]
    decimals = [_char_value(c) for c in fraction]
    if not values or None in values or None in decimals or any(d >= 10 for d in decimals) or (point and not fraction):
        return None
    digits = [v for v in values if v is not None]
    by_digit = len(digits) > 1 and all(v < 10 for v in digits)  # 二〇二六 (float(): a long run is inf, not an error)
    value = float("".join(map(str, digits))) if by_digit else float(_positional(digits))
    if decimals:
        value += float("0." + "".join(str(d) for d in decimals))
    return value


def written_int(text: str | None) -> int | None:
    """A whole number written in Arabic digits or as a Chinese numeral (12, 十二, 二〇二六); None for None, for a
    fraction and for anything else."""
    if text is None:
        return None
    text = text.strip()
    if text.isdigit():
        return int(text)
    value = zh_number(text)
    return int(value) if value is not None and value.is_integer() else None


def en_number(words: str) -> int:
    """The value of English number words below a hundred: 'five' 5, 'twenty-one' and 'twenty one' 21 (KeyError for a
    word that is not in EN_NUMBER_WORDS; the caller matched them with a pattern built from it)."""
    return sum(EN_NUMBER_WORDS[w] for w in re.split(r"[- ]", words))


def month_number(text: str | None) -> int | None:
    """A month's number from its name (January, jan, Sept., any case) or its number (12, 十二); not range-checked:
    13 is 13, and the caller decides. None when it is neither."""
    if text is None:
        return None
    return MONTHS.get(text.strip().lower().rstrip(".")) or written_int(text)
