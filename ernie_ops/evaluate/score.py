"""Pure checks of one answer: which phrases failed, and whether a docs answer cites the right passages."""

from __future__ import annotations

import unicodedata


def _norm(text: str, case_sensitive: bool) -> str:
    """NFKC (full-width digits and letters match their ASCII forms) and, unless asked otherwise, case-folded."""
    text = unicodedata.normalize("NFKC", text)
    return text if case_sensitive else text.casefold()


def contains(text: str, phrase: str, case_sensitive: bool = False) -> bool:
    return _norm(phrase, case_sensitive) in _norm(text, case_sensitive)


def phrase_failures(answer: str, must_include: list[str], must_not_include: list[str], case_sensitive: bool = False) -> list[str]:
    """One sentence per failed phrase: 'missing "Paris"', 'contains "Lyon"'."""
    out = [f"missing {p!r}" for p in must_include if not contains(answer, p, case_sensitive)]
    out += [f"contains {p!r}" for p in must_not_include if contains(answer, p, case_sensitive)]
    return out


def citation_failures(cited: list[int], passages: list[str], expected: list[str], case_sensitive: bool = False) -> list[str]:
    """A docs answer must cite (【n】 placed after a sentence), and each passage it cites must hold an expected phrase.

    `cited`: the 1-based numbers of `passages` the answer's markers point at."""
    if not cited:
        return ["cites no passage"]
    wrong = [n for n in cited if not any(contains(passages[n - 1], p, case_sensitive) for p in expected)]
    return [f"cites 【{n}】, which holds none of {expected!r}" for n in wrong]


def pass_rate(results: list[tuple[bool, float]]) -> float:
    """The weighted share of passed cases: sum of passed weights / sum of weights (0.0 for no case)."""
    total = sum(w for _, w in results)
    return sum(w for ok, w in results if ok) / total if total else 0.0
