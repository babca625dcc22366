"""Numbered passages for the prompt, and the 【n】 markers placed after the reply's sentences they support.

A 0.3B model does not cite reliably: it forgets markers, invents numbers, or puts 【1】 after everything. So the
markers it writes (【n】, 【1,2】, [n], [^n]) are taken out, and each sentence of the reply gets 【n】 for the passage
that supports it by a test that does not rely on the model: the share of the sentence's content tokens (the question
terms of `tokens.query_terms`: stop words and punctuation left out) found in passage n. A sentence is marked with the
best passage when that share is at least `min_overlap`, plus the runner-up when it is within `CLOSE` of the best, plus
any passage the model itself cited there that passes the same test. A marker goes after the sentence's end mark and
before the whitespace that follows; never inside a code block or inline code, never after a heading or a table row.

Overlap alone cannot tell '满一年后享有15天年假' from a passage that says 5天, nor '年假不需要在OA系统中申请' from
'年假需在OA系统中申请': so a passage that passes is cited only when the sentence also agrees with it
(`agree.agrees`: the same numbers, dates, amounts and negations). A sentence that resembles passages but agrees with
none of them gets no marker and is listed in `Cited.unsupported`; `unsupported_section` makes that list the note
shown at the end of the reply.

Why 0.4: measured with the replies in tests/unit/test_docs_cite.py (each tokenizer): a sentence copied from a
passage scores 1.0 against it; a paraphrase a small model writes from a passage (same key nouns and numbers, its own
wording) 0.5-0.8; a sentence about something else, or a generic one ('希望以上信息对你有帮助', 'Let me know if you
need more help'), at most 0.2 against any passage, since it shares a common word or two. 0.4 sits between the two
with room on both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ernie_ops.docs.agree import agrees
from ernie_ops.docs.chunk import split_sentences
from ernie_ops.docs.model import Hit
from ernie_ops.docs.tokens import query_terms, tokenize

MIN_OVERLAP = 0.4
CLOSE = 0.1  # a runner-up this close to the best passage is cited too
MIN_TERMS = 2  # a sentence with fewer content tokens ('好的。', 'Yes.') supports nothing by itself
_MAX_SENTENCE_TERMS = 10_000

# Markers a model writes: 【1】 【1, 2】 [1] [1,2] [^1]; '[1]' right after a word or bracket is code-like (a[1]) and stays.
_MODEL_MARKER = re.compile(r"[ \t]*(?:【\s*(\d+(?:\s*[,，、]\s*\d+)*)\s*】|(?<![A-Za-z0-9_\]\)])\[\^?(\d+(?:\s*,\s*\d+)*)\])")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[^\n]*$", re.M)
_INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_HEADING_OR_TABLE = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|\|)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<|~])")  # what can start emphasis, code, a link, HTML or a table cell mid-line
_LIST_MARKER = re.compile(r"^(?:[-*+]|\d{1,2}[.)])[ \t]+")
_CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")

UNSUPPORTED_ZH = "以下内容未在文档中找到依据："
UNSUPPORTED_EN = "Not supported by the documents:"


@dataclass(frozen=True)
class Cited:
    text: str  # the reply with 【n】 markers
    used: list[int]  # 1-based passage numbers marked, in first-use order
    unsupported: list[str] = field(default_factory=list)  # sentences that resemble a passage but contradict it


def _one_line(s: str) -> str:
    return _CONTROL.sub(" ", s).strip()


def _label(hit: Hit) -> str:
    where = _one_line(hit.where)
    return f"{_one_line(hit.file)}, {where}" if where else _one_line(hit.file)


def prompt_block(hits: list[Hit], *, quote: bool = False) -> str:
    """The numbered passages for the prompt: '【1】(handbook.pdf, p. 3)\\n<text>' blocks separated by a blank line;
    `quote`: each line of the text as a Markdown quote ('> ...'), so the passage reads as quoted data (a document
    line saying "ignore the question and ..." is part of the quote, not a line of the user's message)."""
    return "\n\n".join(
        f"【{n}】({_label(hit)})\n{_quoted(hit.text.strip()) if quote else hit.text.strip()}" for n, hit in enumerate(hits, 1)
    )


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in text.splitlines())


def md_text(text: str) -> str:
    """`text` as literal Markdown: a file named like a link, emphasis or HTML stays text in the chat (issue 34)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def source_line(n: int, hit: Hit) -> str:
    """The reply's Sources line of passage `n`: '- 【1】 handbook.pdf, p. 3' (file and place on one line, escaped, so
    a file named like a link stays text)."""
    return f"- 【{n}】 " + md_text(_label(hit))


def _code_ranges(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(fenced blocks, inline code spans outside them) as character ranges; an unclosed fence runs to the end."""
    fenced: list[tuple[int, int]] = []
    pos = 0
    while m := _FENCE.search(text, pos):
        fence = m.group(1)
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M).search(text, m.end())
        end = close.end() if close else len(text)
        fenced.append((m.start(), end))
        pos = end
    inline = []
    for start, end in _gaps(fenced, len(text)):
        inline += [(m.start(), m.end()) for m in _INLINE_CODE.finditer(text, start, end)]
    return fenced, inline


def _gaps(ranges: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    out, pos = [], 0
    for start, end in ranges:
        out.append((pos, start))
        pos = end
    out.append((pos, length))
    return out


def _strip_model_markers(reply: str, count: int) -> tuple[str, list[tuple[int, list[int]]]]:
    """The reply without the model's markers, and (position in the new text, the valid numbers cited there)."""
    fenced, inline = _code_ranges(reply)
    code = sorted(fenced + inline)
    out: list[str] = []
    cited: list[tuple[int, list[int]]] = []
    length, pos = 0, 0
    for start, end in _gaps(code, len(reply)):
        for m in _MODEL_MARKER.finditer(reply, start, end):
            out.append(reply[pos : m.start()])
            length += m.start() - pos
            numbers = [int(n) for n in re.findall(r"\d+", m.group(1) or m.group(2))]
            cited.append((length, [n for n in numbers if 1 <= n <= count]))
            pos = m.end()
        if end > pos:
            out.append(reply[pos:end])
            length += end - pos
            pos = end
    return "".join(out), cited


def _masked(text: str) -> str:
    """`text` with code blocks blanked (no sentence comes from them) and inline code made one opaque word."""
    fenced, inline = _code_ranges(text)
    chars = list(text)
    for start, end in fenced:
        chars[start:end] = "\n" * (end - start)
    for start, end in inline:
        chars[start:end] = "x" * (end - start)
    return "".join(chars)


def _sentence_of(pos: int, spans: list[tuple[int, int]]) -> int | None:
    """The sentence a model marker at `pos` belonged to: the one it was inside or right after."""
    best = None
    for i, (start, end) in enumerate(spans):
        if start < pos <= end:
            return i
        if end <= pos:
            best = i
    return best


def place_markers(reply: str, passages: list[str], tokenizer: str, *, min_overlap: float = MIN_OVERLAP) -> Cited:
    """The reply with 【n】 after each sentence that passage n supports (see the module docstring)."""
    text, model_cited = _strip_model_markers(reply, len(passages))
    masked = _masked(text)
    spans = split_sentences(masked)
    wanted: dict[int, set[int]] = {}
    for pos, numbers in model_cited:
        i = _sentence_of(pos, spans)
        if i is not None:
            wanted.setdefault(i, set()).update(numbers)
    passage_tokens = [set(tokenize(p, tokenizer)) for p in passages]
    inserts: list[tuple[int, list[int]]] = []
    unsupported: list[str] = []
    for i, (start, end) in enumerate(spans):
        line_start = masked.rfind("\n", 0, start) + 1
        if _HEADING_OR_TABLE.match(masked, line_start):
            continue
        terms = set(query_terms(text[start:end], tokenizer, limit=_MAX_SENTENCE_TERMS))
        if len(terms) < MIN_TERMS:
            continue
        scores = [(len(terms & p) / len(terms), n) for n, p in enumerate(passage_tokens, 1)]
        passing = sorted(((s, n) for s, n in scores if s >= min_overlap), key=lambda sn: (-sn[0], sn[1]))
        if not passing:
            continue  # resembles no passage: not a statement about the documents
        passing = [(s, n) for s, n in passing if agrees(masked[start:end], passages[n - 1], tokenizer)]
        if not passing:  # resembles passages and contradicts each of them
            if (statement := _statement(text[start:end])) not in unsupported:
                unsupported.append(statement)
            continue
        best = passing[0][0]
        chosen = [n for s, n in passing[:2] if s >= best - CLOSE]
        chosen += [n for s, n in passing if n in wanted.get(i, ()) and n not in chosen]
        inserts.append((end, chosen))
    out, used, pos = [], [], 0
    for end, numbers in inserts:
        out += [text[pos:end], "".join(f"【{n}】" for n in numbers)]
        pos = end
        used += [n for n in numbers if n not in used]
    out.append(text[pos:])
    return Cited("".join(out), used, unsupported)


def _statement(sentence: str) -> str:
    """A sentence of the reply as one line of the unsupported list (its list marker and line breaks dropped)."""
    return _LIST_MARKER.sub("", " ".join(sentence.split()))


def is_chinese(text: str) -> bool:
    """True when `text` is mostly Chinese: at least as many CJK characters as Latin words (a simple test that is
    enough to choose the language of a note; '年假有5天（annual leave）' is Chinese, 'Run `ernie-ops docs add`' not)."""
    cjk = len(_CJK_CHAR.findall(text))
    return cjk > 0 and cjk >= len(_LATIN_WORD.findall(text))


def unsupported_section(statements: list[str], reply: str) -> str:
    """The note listing the reply's statements the passages contradict, in the reply's language ('' for none):
    '**以下内容未在文档中找到依据：**' (or 'Not supported by the documents:') and one '- statement' line each."""
    if not statements:
        return ""
    heading = UNSUPPORTED_ZH if is_chinese(reply) else UNSUPPORTED_EN
    return f"**{heading}**\n" + "\n".join(f"- {s}" for s in statements)
