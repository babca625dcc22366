"""Does the model's welcome say only what the HR record says? Pure logic on the text and the facts.

The welcome is stored for good (the push log never rewrites it), so a welcome that names the wrong
department or invents a salary ("欢迎张三加入市场部……月薪五万") must not get there. The rules:
- a department, role or manager it names must be the record's (a name from the templates that is not
  the record's counts as named wherever it appears);
- a date it names (2026-12-05, 12月5日, 十二月五日, Dec 5, a weekday) must be the start date;
- any other number, amount or duration (15天, 五万, 三千元, 50,000, twenty) is invented: the facts hold no
  number but the start date's (and whatever digits the name, department, role or manager hold).
`mismatch` returns the first reason found, or None when the text may be pushed. It errs on the side of
refusing: a refused welcome costs only the model's wording (the plain welcome is pushed instead).

Numerals, number words and month names are read by ernie_ops.text_numbers (五, 万, 廿, 壹 ...). A lone 一
is not taken for a number (一起, 一员, 第一周, 一名); a lone other numeral is one when a measure word
follows it (三天, 两个, 五点); two numerals in a row always are (五万, 三千, 十五).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date

from ernie_ops.onboarding.plan import Facts
from ernie_ops.text_numbers import EN_NUMBER_WORDS, EN_SCALES, MONTH_NAMES_PATTERN, ZH_NUMERALS_ALL, month_number, written_int

DEPT_SUFFIXES = ("事业部", "部门", "中心", "团队", "小组", "部", "组")
_MEASURES = set("天日月年周个位元块岁次时号名份倍折点期届层楼项条门")
_NOT_A_MENTION_ZH = ("我们", "咱们", "公司", "本公司", "这个", "这支", "整个", "新", "大", "本", "的")
_NOT_A_MENTION_EN = {"the", "our", "your", "this", "a", "an", "new", "great", "amazing", "wonderful", "whole", "entire", "awesome"}
_GENERIC_ROLES = ("新员工", "新同事", "新人", "新成员", "成员", "员工", "同事", "伙伴", "一员", "一份子", "一分子")
_GENERIC_ROLES_EN = {"member", "colleague", "teammate", "employee", "hire", "part", "joiner", "friend", "new", "starter"}
_WEEKDAYS_ZH = "一二三四五六日"
_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# English number words but zero and one ('one of us', 'the one'): a welcome has no use for the others.
_EN_NUMBERS = "|".join([w for w, v in EN_NUMBER_WORDS.items() if v >= 2] + [*EN_SCALES, "dozen"])

_STOP = r"[^，,。！!？?；;、：:\s（）()“”\"']"
_ZH_DEPT = re.compile(
    r"(?:加入|来到|入职|加盟|调入|成为|欢迎到|欢迎来)(?P<d>(?:(?![了和与及都也在是有你他她这那个每])[\u4e00-\u9fffA-Za-z0-9&]){1,10}?)"
    r"(?P<s>事业部|部门|中心|团队|小组|部|组)"
)
_EN_DEPT = re.compile(
    r"\b(?:join(?:s|ed|ing)?|to|in|into|of|with)\s+(?P<d>[A-Za-z][A-Za-z&/\-]*(?:\s+[A-Za-z][A-Za-z&/\-]*){0,3}?)\s+"
    r"(?P<s>department|dept\.?|division|team|group)\b",
    re.IGNORECASE,
)
_ZH_ROLE = re.compile(
    rf"(?:岗位是|职位是|岗位为|职位为|担任|出任|岗位：|职位：|作为一名|作为一位|成为一名|成为一位)\s*(?P<r>{_STOP}{{1,20}})"
)
_EN_ROLE = re.compile(
    r"\b(?:(?:role|position|title|job)\s+(?:is|as|of)|as\s+(?:a|an|our))\s+(?:a\s+|an\s+|the\s+|our\s+)?(?:new\s+)?"
    r"(?P<r>[A-Za-z][\w&/+\-]*(?:\s+(?!in\b|at\b|on\b|with\b|for\b|and\b|to\b|of\b)[A-Za-z][\w&/+\-]*){0,3})",
    re.IGNORECASE,
)
_ZH_MANAGER = re.compile(
    rf"(?:直属上级|上级|经理|主管|导师|领导|负责人|mentor|leader|manager)\s*(?:是|为|：|:)\s*(?P<m>{_STOP}{{1,12}})", re.IGNORECASE
)
_ZH_REPORT = re.compile(rf"(?:向|跟)(?P<m>{_STOP}{{1,8}}?)(?:汇报|报到)")
_EN_MANAGER = re.compile(
    r"\b(?:(?:manager|supervisor|mentor|lead|boss)\s*,?\s*(?:is|will\s+be)|reports?\s+to|reporting\s+to)\s+"
    r"(?P<m>[A-Z][\w.'\-]*(?:\s+[A-Z][\w.'\-]*)?)"
)
_CN = rf"[{ZH_NUMERALS_ALL}]{{1,4}}"
_MONTH = MONTH_NAMES_PATTERN
_DATES = [
    re.compile(r"(?P<y>\d{4})\s*[-/.]\s*(?P<m>\d{1,2})\s*[-/.]\s*(?P<d>\d{1,2})"),
    re.compile(rf"(?:(?P<y>\d{{4}}|{_CN})\s*年\s*)?(?P<m>\d{{1,2}}|{_CN})\s*月(?:\s*(?P<d>\d{{1,2}}|{_CN})\s*[日号])?"),
    re.compile(rf"\b(?P<mn>{_MONTH})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(?P<y>\d{{4}}))?", re.IGNORECASE),
    re.compile(rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mn>{_MONTH})\b\.?(?:,?\s*(?P<y>\d{{4}}))?", re.IGNORECASE),
    re.compile(r"(?P<y>\d{4})\s*年"),
    re.compile(rf"(?<![\d{ZH_NUMERALS_ALL}])(?P<d>\d{{1,2}}|{_CN})\s*号"),
]
_WEEKDAY = re.compile(rf"(?:星期|礼拜|周)(?P<w>[{_WEEKDAYS_ZH}天])|\b(?P<we>{'|'.join(_WEEKDAYS_EN)})\b", re.IGNORECASE)
_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")
_EN_NUMBER = re.compile(rf"\b(?:{_EN_NUMBERS})\b", re.IGNORECASE)


def _core_zh(text: str) -> str:
    text = text.strip()
    changed = True
    while changed and text:
        changed = False
        for word in _NOT_A_MENTION_ZH:
            if text.startswith(word):
                text, changed = text[len(word) :], True
    for suffix in DEPT_SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            return text[: -len(suffix)]
    return text


def _core_en(text: str) -> str:
    words = text.split()
    while words and words[0].lower() in _NOT_A_MENTION_EN:
        words.pop(0)
    return " ".join(words)


def _same(named: str, record: str) -> bool:
    """A named value is the record's when one holds the other (研发 / 研发部 / 研发中心; SRE / SRE 工程师)."""
    a, b = named.strip().casefold(), record.strip().casefold()
    return bool(a and b) and (a in b or b in a)


def _department(text: str, facts: Facts, departments: Iterable[str]) -> str | None:
    record = _core_zh(facts.department) or facts.department
    for m in _ZH_DEPT.finditer(text):
        named = _core_zh(m["d"])
        if named and not _same(named, record):
            return f"names the department {named + m['s']!r}, the record's is {facts.department!r}"
    for m in _EN_DEPT.finditer(text):
        named = _core_en(m["d"])
        proper = all(w[0].isupper() for w in named.split())  # "the Marketing team", not "have you on the team"
        if named and (proper or m["s"].lower().startswith(("dep", "div"))) and not _same(named, record):
            return f"names the department {named!r}, the record's is {facts.department!r}"
    for other in departments:
        if other.strip() and not _same(_core_zh(other) or other, record) and other in text:
            return f"names the department {other!r}, the record's is {facts.department!r}"
    return None


def _role(text: str, facts: Facts, roles: Iterable[str]) -> str | None:
    for m in _ZH_ROLE.finditer(text):
        named = m["r"].removesuffix("一职").removesuffix("岗位").removesuffix("职位").removesuffix("的工作")
        if named.startswith(_GENERIC_ROLES) or named.startswith("新"):
            continue
        if not _same(named, facts.role):
            return f"names the role {named!r}, the record's is {facts.role or '(none)'!r}"
    for m in _EN_ROLE.finditer(text):
        named = m["r"]
        if any(w.lower() in _GENERIC_ROLES_EN for w in named.split()):
            continue
        if not _same(named, facts.role):
            return f"names the role {named!r}, the record's is {facts.role or '(none)'!r}"
    for other in roles:
        if other.strip() and not _same(other, facts.role) and re.search(rf"(?<![A-Za-z]){re.escape(other)}(?![A-Za-z])", text):
            return f"names the role {other!r}, the record's is {facts.role or '(none)'!r}"
    return None


def _manager(text: str, facts: Facts) -> str | None:
    record = facts.manager or ""
    for pattern in (_ZH_MANAGER, _ZH_REPORT, _EN_MANAGER):
        for m in pattern.finditer(text):
            named = m["m"].strip()
            if named.startswith(("你", "您", "我", "他", "她", "大家", "人事", "HR", "团队", "同事", "your", "Your", "the", "The")) or any(
                w in named for w in ("上级", "经理", "主管", "领导", "导师")
            ):
                continue  # "向你的直属上级汇报": no one named
            for title in ("老师", "经理", "总", "先生", "女士", "同学", "姐", "哥"):
                named = named.removesuffix(title) or named
            if not _same(named, record):
                return f"names the manager {m['m'].strip().rstrip('.')!r}, the record's is {record or '(none)'!r}"
    return None


def _dates(text: str, start: date) -> tuple[str | None, str]:
    """The first date that is not the start date (a reason), and the text with the start date's mentions blanked."""
    for pattern in _DATES:
        out, pos = [], 0
        for m in pattern.finditer(text):
            groups = m.groupdict()
            month = month_number(groups.get("mn") or groups.get("m"))
            year, day_ = written_int(groups.get("y")), written_int(groups.get("d"))
            if groups.get("m") is not None and month is None:
                continue
            if (
                (year is not None and year != start.year)
                or (month is not None and month != start.month)
                or (day_ is not None and day_ != start.day)
            ):
                return f"names the date {m.group(0).strip()!r}, the start date is {start.isoformat()}", text
            out.append(text[pos : m.start()] + " ")
            pos = m.end()
        text = "".join(out) + text[pos:]
    for m in _WEEKDAY.finditer(text):
        weekday = _WEEKDAYS_ZH.index(m["w"]) if m["w"] and m["w"] != "天" else 6 if m["w"] else _WEEKDAYS_EN.index(m["we"].lower())
        if weekday != start.weekday():
            return f"names the weekday {m.group(0)!r}, the start date {start.isoformat()} is a {_WEEKDAYS_EN[start.weekday()]}", text
    return None, _WEEKDAY.sub(" ", text)


def _cjk_numbers(text: str) -> list[str]:
    found, i = [], 0
    while i < len(text):
        if text[i] not in ZH_NUMERALS_ALL:
            i += 1
            continue
        j = i
        while j < len(text) and text[j] in ZH_NUMERALS_ALL:
            j += 1
        run = text[i:j]
        after = text[j] if j < len(text) else ""
        if (len(run) >= 2 and set(run) != {"一"}) or (len(run) == 1 and run != "一" and after in _MEASURES):
            found.append(run + (after if after in _MEASURES else ""))
        i = j
    return found


def mismatch(text: str, facts: Facts, *, departments: Iterable[str] = (), roles: Iterable[str] = ()) -> str | None:
    """Why the welcome says something the record does not (None: it says only the record's facts).
    `departments`/`roles`: the names the templates know (another one named anywhere is refused)."""
    reason = _department(text, facts, departments) or _role(text, facts, roles) or _manager(text, facts)
    if reason:
        return reason
    rest = text
    for fact in sorted((facts.name, facts.department, facts.role, facts.manager or "", facts.employee), key=len, reverse=True):
        if fact.strip():
            rest = rest.replace(fact.strip(), " ")
    reason, rest = _dates(rest, facts.start_date)
    if reason:
        return reason
    numbers = _DIGITS.findall(rest) + _cjk_numbers(rest) + _EN_NUMBER.findall(rest)
    if numbers:
        return f"holds {', '.join(repr(n) for n in numbers[:3])}, a number that is not among the facts"
    return None
