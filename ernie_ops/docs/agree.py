"""Whether a sentence says what the passage it resembles says: its numbers, dates, amounts and negations. Word
overlap (`cite`) cannot tell '15天带薪年假' from the passage's '5天', nor a dropped 不; `agrees` is the second test a
sentence passes before it gets a passage's marker. Pure functions, Chinese and English alike; numerals read by
ernie_ops.text_numbers.
Why, and each rule in full: docs/design/answer-agreement.md.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ernie_ops.docs.chunk import split_sentences
from ernie_ops.docs.tokens import query_terms, tokenize
from ernie_ops.text_numbers import (
    EN_NUMBER_WORDS,
    EN_SCALES,
    MONTH_NAMES_PATTERN,
    ZH_NUMERALS,
    en_number,
    month_number,
    written_int,
    zh_number,
)

CLAUSE_MATCH = 0.5  # share of a sentence clause's content words a passage clause must hold to be its counterpart
CLOSE_MATCH = 0.1  # passage clauses this close to the best one are counterparts too; agreeing with one is enough
MIN_CLAUSE_TERMS = 2  # a shorter clause ('是的', 'No') is not compared
_MAX_TERMS = 10_000


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str  # a canonical unit ('day', 'second', 'yuan', '%', 'oclock'...), a measure word as written, '' for none


@dataclass(frozen=True)
class Date:
    year: int | None
    month: int
    day: int | None


@dataclass(frozen=True)
class Facts:
    dates: tuple[Date, ...]
    quantities: tuple[Quantity, ...]


# --- normalising ------------------------------------------------------------------------------------------------

_CIRCLED = re.compile("[\u2460-\u24ff\u2776-\u2793]")  # ① ⑴ ⒈ ❶: list markers that NFKC would make digits
_LIST_MARKER = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,2}[.)、]|\(\d{1,2}\)|（\d{1,2}）)[ \t]+", re.M)


def normalise(text: str) -> str:
    """NFKC, lowercased, with curly apostrophes straight, circled numbers and list markers ('1. ', '- ') removed."""
    text = unicodedata.normalize("NFKC", _CIRCLED.sub(" ", text)).lower().replace("\u2019", "'")
    return _LIST_MARKER.sub(lambda m: " " * len(m.group()), text)


# --- numbers ----------------------------------------------------------------------------------------------------

# Units after a number ('|' between spellings): each maps to (canonical unit, factor to it). Units of one dimension
# share a canonical unit so that 两周 and 14天, 一年 and 12个月 compare equal.
_UNIT_SPELLINGS = {
    ("day", 1): "个工作日|工作日|个自然日|自然日|天|日|days|day|business days|business day|working days|working day"
    + "|calendar days|calendar day",
    ("day", 7): "个星期|星期|礼拜|周|weeks|week",
    ("month", 1): "个月|months|month",
    ("month", 12): "年|years|year",
    ("second", 3600): "个小时|个钟头|小时|钟头|hours|hour|hrs|hr|h",
    ("second", 60): "分钟|minutes|minute|mins|min",
    ("second", 1): "秒钟|秒|seconds|second|secs|sec|s",
    ("yuan", 1): "元|块钱|块|人民币|yuan|rmb|cny",
    ("usd", 1): "美元|美金|usd|us dollars|dollars|dollar",
    ("%", 1): "%|percent|per cent",
    ("oclock", 1): "点钟|点|时|o'clock|am|a.m.|pm|p.m.",
}
_UNITS: dict[str, tuple[str, float]] = {u: unit for unit, spellings in _UNIT_SPELLINGS.items() for u in spellings.split("|")}
_MEASURE_WORDS = list("个次张条项名位人份页台岁倍级步层家件种本篇章节句行字号届轮批组套部所间座辆门笔期")  # kept as written
_TIME_UNITS = {"day", "month", "second", "yuan", "usd", "%"}  # the units 一 must stand before to be a number
_PREFIX_CURRENCY = {"$": "usd", "¥": "yuan"}
_MULTIPLIERS = {"万": 10_000, "亿": 100_000_000, "千": 1000, "百": 100}

_UNIT_ALTERNATIVES = "|".join(
    re.escape(u) + (r"\b" if u[-1].isascii() and u[-1].isalpha() else "")  # '5 days', not the s of '3 steps'
    for u in sorted([*_UNITS, *_MEASURE_WORDS], key=len, reverse=True)
)
_EN_DIGIT_WORDS = "|".join(w for w, v in EN_NUMBER_WORDS.items() if 1 <= v <= 9)  # the 'five' of 'twenty-five'
_EN_NUMBER = rf"(?:{'|'.join(sorted(EN_NUMBER_WORDS, key=len, reverse=True))})(?:[- ](?:{_EN_DIGIT_WORDS}))?"
_NUMBER = re.compile(
    rf"(?P<pct_zh>百分之)?(?:(?P<cur>[$¥])\s*)?"
    rf"(?:(?P<ar>\d+(?:,\d{{3}})*(?:\.\d+)?)(?:\s*(?P<mult>[万亿千百]))?"
    rf"|(?P<zh>[{ZH_NUMERALS}]+(?:点[零〇一二三四五六七八九]+)?)"
    rf"|\b(?P<en>{_EN_NUMBER})\b)"
    rf"(?:\s*(?P<scale>hundred|thousand|million|billion)\b)?"
    rf"(?:\s*(?P<unit>{_UNIT_ALTERNATIVES}))?"
)
_AFTERNOON = re.compile(r"(?:下午|晚上|傍晚)\s*$")
_TIME = re.compile(r"(?<![\d.:])([01]?\d|2[0-3]):([0-5]\d)(?![\d:])(?:\s*(am|pm)\b)?")

# Dates: 2026-01-05 2026/1/5 2026.1.5; [2026年]1月5日 (Arabic or Chinese); January 5[, 2026]; 5 January [2026].
_ZH_SMALL_NUMBER = r"\d{1,2}|[一二三四五六七八九十]{1,3}"
_DATE = re.compile(
    rf"(?<!\d)(?P<iy>\d{{4}})[-/.](?P<im>\d{{1,2}})[-/.](?P<id>\d{{1,2}})(?!\d)"
    rf"|(?:(?P<zy>\d{{4}}|[〇零一二三四五六七八九]{{4}})\s*年\s*)?(?<![\d个])(?P<zm>{_ZH_SMALL_NUMBER})\s*月(?:\s*(?P<zd>{_ZH_SMALL_NUMBER})\s*[日号])?"
    rf"|\b(?P<em>{MONTH_NAMES_PATTERN})\.?\s+(?P<ed>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(?P<ey>\d{{4}})\b)?"
    rf"|\b(?P<fd>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<fm>{MONTH_NAMES_PATTERN})\b\.?(?:,?\s*(?P<fy>\d{{4}})\b)?"
)


def _date(m: re.Match[str]) -> Date | None:
    g = m.groupdict()
    if g["iy"]:
        year, month, day = int(g["iy"]), int(g["im"]), int(g["id"])
    elif g["zm"]:
        year, month, day = written_int(g["zy"]), written_int(g["zm"]), written_int(g["zd"])
    elif g["em"]:
        year, month, day = written_int(g["ey"]), month_number(g["em"]), int(g["ed"])
    else:
        year, month, day = written_int(g["fy"]), month_number(g["fm"]), int(g["fd"])
    if not (month and 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
        return None
    return Date(year, month, day)


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _quantity(text: str, m: re.Match[str]) -> Quantity | None:
    """The quantity a `_NUMBER` match stands for, or None when it is no number (part of a word, an ordinal, an idiom)."""
    g = m.groupdict()
    before = text[max(0, m.start() - 1) : m.start()]
    unit_text = g["unit"]
    if g["ar"]:
        after = text[m.end() : m.end() + 2]
        if re.match(r"[a-z_\d.]", before) or (not unit_text and re.match(r"[a-z_]|[.\-]\d", after)):
            return None  # v1.2  ipv6  x86_64  10.0.0.1
        value = float(g["ar"].replace(",", "")) * _MULTIPLIERS.get(g["mult"] or "", 1)
    elif g["zh"]:
        numeral = g["zh"]
        if numeral[0] in "百千万亿" or (len(numeral) == 1 and not unit_text and not g["pct_zh"]):
            return None  # 千万不要  万一  一下  十分
        value = zh_number(numeral)
        if value is None:
            return None  # not a numeral (the pattern matches numerals only: not expected)
        unit = _UNITS.get(unit_text or "", ("",))[0]
        if numeral == "一" and unit not in _TIME_UNITS:
            return None  # the article in 一个问题, 一次, 一点
    else:
        if re.match(r"[a-z]", before) or (g["en"] == "one" and not unit_text):
            return None  # 'the one that', 'someone'
        value = float(en_number(g["en"]))
    if g["scale"]:
        value *= EN_SCALES[g["scale"]]
    if text[max(0, m.start() - 1) : m.start()] == "第":
        return None  # an ordinal: 第三方, 第2步
    if g["pct_zh"]:
        return Quantity(value, "%")
    if g["cur"]:
        return Quantity(value, _PREFIX_CURRENCY[g["cur"]])
    if unit_text == "年" and len(g["ar"] or g["zh"] or "") == 4 and value.is_integer() and 1900 <= value < 2200:
        return Quantity(value, "year")  # a calendar year (2026年, 二〇二六年), not twelve months times 2026
    if unit_text in _UNITS:
        canonical, factor = _UNITS[unit_text]
        afternoon = unit_text in ("pm", "p.m.") or _AFTERNOON.search(text[max(0, m.start() - 4) : m.start()])
        if canonical == "oclock" and afternoon and value < 12:
            value += 12
        return Quantity(value * factor, canonical)
    return Quantity(value, unit_text or "")


def facts(text: str) -> Facts:
    """The dates and quantities written in `text` (see the module docstring)."""
    text = normalise(text)
    dates = []
    for m in _DATE.finditer(text):
        if d := _date(m):
            dates.append(d)
            text = _blank(text, m.start(), m.end())
    quantities = []
    for m in _TIME.finditer(text):
        hour = int(m.group(1)) + (12 if m.group(3) == "pm" and int(m.group(1)) < 12 else 0)
        quantities.append(Quantity(hour + int(m.group(2)) / 60, "oclock"))
        text = _blank(text, m.start(), m.end())
    for m in _NUMBER.finditer(text):
        if q := _quantity(text, m):
            quantities.append(q)
    return Facts(tuple(dates), tuple(quantities))


def _same(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _quantity_found(q: Quantity, passage: Facts) -> bool:
    if any(_same(q.value, p.value) and (not q.unit or not p.unit or q.unit == p.unit) for p in passage.quantities):
        return True
    if q.unit == "year":
        return any(d.year is not None and _same(q.value, d.year) for d in passage.dates)  # 2026年 / 2026-01-01
    if q.unit:
        return False
    parts = [x for d in passage.dates for x in (d.year, d.month, d.day) if x is not None]
    return any(_same(q.value, x) for x in parts)  # a bare number may be part of one of the passage's dates


def _date_found(d: Date, passage: Facts) -> bool:
    return any(
        d.month == p.month and (d.day is None or d.day == p.day) and (d.year is None or p.year is None or d.year == p.year)
        for p in passage.dates
    )


def unsupported_facts(sentence: str, passage: str) -> list[Date | Quantity]:
    """The sentence's dates and quantities that the passage does not state ([] when they all agree)."""
    s, p = facts(sentence), facts(passage)
    return [d for d in s.dates if not _date_found(d, p)] + [q for q in s.quantities if not _quantity_found(q, p)]


# --- negation ---------------------------------------------------------------------------------------------------

# Words that hold a negation character or word without negating anything; removed before negations are looked for.
_NOT_NEGATIONS = re.compile(
    "不得不|不能不|不同|不断|不过|不仅|不但|不少|不久|不论|不管|不错|不如|不然|不一样|毫不犹豫|"
    "不超过|不少于|不低于|不高于|不多于|不晚于|不早于|不大于|不小于|"
    "无论|未来|未必不|非常|除非|无线|非洲|南非|别人|别的|"
    r"\bno (?:more|later|earlier|less|fewer) than\b|\bnot (?:more|later|earlier|less|fewer) than\b|\bnot only\b|"
    r"\bno matter\b|\bno\.(?=\s*\d)|\bnonetheless\b|\bnevertheless\b|\bnotwithstanding\b"
)
_NEGATION = re.compile(
    "不需要|不必|不用|不得|不能|不可|不要|没有|无需|无须|无法|禁止|严禁|并非|不|没|无|未|非|勿"
    "|(?<![\u3400-\u9fff])别|(?<=[请你您也就都万])别"  # 别 negates as an imperative (请别, 千万别), not in 假别 or 性别
    r"|n't\b|\b(?:not|no|never|without|none|nothing|nobody|cannot|neither|nor)\b"
)
# Modal and auxiliary words between a negation and the word it negates: 不需要在OA系统申请 negates 申请 in OA, not 在.
_FILLER = re.compile(
    r"\s*(?:需要|需|必须|必|应该|应当|应|可以|可|能够|能|会|要|用|得|是|太|很|再|都|也|就|在|于|被|把|给|让|对|向|从|一定"
    r"|(?:be|is|are|was|were|been|being|do|does|did|have|has|had|to|a|an|the|any|need|needs|needed|required|require"
    r"|allowed|permitted|necessary|possible|able|always|also|ever|yet|so|very|really|for|of|with|in|on|at|by|from|about)\b)"
)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{1,2}")
_CLAUSE_BREAK = re.compile(r"[，,；;：:。！？!?\n]+|(?<=[a-z0-9])\.(?=\s|$)|\bbut\b|但是|但|然而|而且")
_TABLE_ROW = re.compile(r"^[ \t]*(?:\||#{1,6}[ \t]).*$", re.M)
_WINDOW = 4  # characters after a negation (and its modal words) where a negation on the other side may find its target


@dataclass(frozen=True)
class _Negation:
    target: str  # what it negates: the next word or two Chinese characters, '' when nothing follows in the clause
    window: str  # the text right after it (fillers skipped), where the other side's target may sit


def _negations(clause: str) -> list[_Negation]:
    text = _NOT_NEGATIONS.sub(lambda m: " " * len(m.group()), clause)
    out = []
    for m in _NEGATION.finditer(text):
        pos = m.end()
        for _ in range(4):  # skip up to four modal words: 不需要在 -> OA
            f = _FILLER.match(text, pos)
            if not f or f.end() == pos:
                break
            pos = f.end()
        rest = text[pos:].lstrip()
        word = _WORD.match(rest)
        target = word.group() if word else ""
        window = re.sub(r"\s+", "", rest)[:_WINDOW] if _CJK.match(rest[:1]) else " ".join(rest.split()[:2])
        out.append(_Negation(target, window))
    return out


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_BREAK.split(text) if c and c.strip()]


def _passage_units(passage: str) -> list[str]:
    """The passage's clauses, then its sentences (for a sentence clause that spans several passage clauses). Table
    rows and headings are left out: a cell's 无 means nothing without its column, and a title has no polarity."""
    text = _TABLE_ROW.sub("", normalise(passage))
    sentences = [text[a:b] for a, b in split_sentences(text)]
    return _clauses(text) + [s for s in sentences if len(_clauses(s)) > 1]


def _without_negations(text: str) -> str:
    return _NEGATION.sub(" ", _NOT_NEGATIONS.sub(" ", text))


def _counterparts(clause: str, passage_units: list[str], tokenizer: str) -> list[str]:
    """The passage clauses (or sentences) holding the most of `clause`'s content words: at least CLAUSE_MATCH of
    them and within CLOSE_MATCH of the best. Several when the passage says the same words twice ('原则上安排调休' and
    '不安排调休'). When none holds enough, the passage clauses whose own words are mostly in `clause` ('年假可以提前
    预支' holds all of '年假不能预支', though only half of its words are there). [] for a clause too short to compare
    or like nothing in the passage."""
    terms = set(query_terms(_without_negations(clause), tokenizer, limit=_MAX_TERMS))
    if len(terms) < MIN_CLAUSE_TERMS:
        return []
    units = [(u, set(tokenize(_without_negations(u), tokenizer))) for u in passage_units]
    for share in (
        lambda tokens: len(terms & tokens) / len(terms),
        lambda tokens: len(terms & tokens) / len(tokens) if len(tokens) >= MIN_CLAUSE_TERMS else 0.0,
    ):
        shares = [(share(tokens), u) for u, tokens in units]
        best = max((s for s, _ in shares), default=0.0)
        if best >= CLAUSE_MATCH:
            return [u for s, u in shares if s >= best - CLOSE_MATCH]
    return []


def _negation_counts(a: str, b: str) -> tuple[int, int]:
    """How many negations of clause `a`, and of clause `b`, bear on what the other clause says."""
    neg_a, neg_b = _negations(a), _negations(b)
    count_a = count_b = 0
    unmatched_b = list(neg_b)
    for n in neg_a:
        partner = next((x for x in unmatched_b if _same_target(n, x)), None)
        if partner is not None:  # both sides negate the same thing: '禁止用个人邮箱' / '不得使用个人邮箱'
            unmatched_b.remove(partner)
            count_a, count_b = count_a + 1, count_b + 1
        elif not n.target or n.target in b:
            count_a += 1
    count_b += sum(1 for x in unmatched_b if not x.target or x.target in a)
    return count_a, count_b


def _same_target(x: _Negation, y: _Negation) -> bool:
    if not x.target or not y.target:
        return not x.target and not y.target
    return x.target in y.window or y.target in x.window


def contradicting_clause(sentence: str, passage: str, tokenizer: str) -> tuple[str, str] | None:
    """(sentence clause, passage clause) when a clause of the sentence is negated where each of its counterparts in
    the passage is not, or the other way round; None when the negations agree."""
    passage_units = _passage_units(passage)
    for clause in _clauses(normalise(sentence)):
        matches = _counterparts(clause, passage_units, tokenizer)
        odd = [m for m in matches if _polarity_differs(clause, m)]
        if matches and len(odd) == len(matches):
            return clause, odd[0]
    return None


def _polarity_differs(clause: str, counterpart: str) -> bool:
    count_s, count_p = _negation_counts(clause, counterpart)
    return count_s % 2 != count_p % 2


def agrees(sentence: str, passage: str, tokenizer: str) -> bool:
    """True when the sentence's numbers, dates, amounts and negations agree with the passage (module docstring)."""
    return not unsupported_facts(sentence, passage) and contradicting_clause(sentence, passage, tokenizer) is None
