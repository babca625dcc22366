"""Output clean-up of a finished reply that never changes Markdown or code.

The three usual clean-up regexes, and why they are not used as written:
- `re.sub(r'\\n\\s*\\n', '\\n\\n', text)` also runs inside code blocks (PEP 8's two blank lines
  between functions become one) - here blank lines are collapsed in prose only.
- `re.sub(r'([，。！？；：])\\s+', r'\\1', text)`: `\\s` matches line breaks, so "步骤：\\n\\n1. …" becomes
  "步骤：1. …" (the list is gone) and paragraphs ending in "。" merge; it also edits code and inline
  code, and deletes a Markdown hard break ("。  \\n"). Here only spaces/tabs/U+3000 between the mark
  and the next character on the same line go, outside code.
- `text = '  ' + text` (first-line indent): Markdown drops leading ASCII spaces, and four of them
  turn the paragraph into a code block. Here, when enabled, prose paragraphs that start with a CJK
  character get two ideographic spaces (U+3000), which render and mean nothing to Markdown.
Code is fenced blocks (``` or ~~~, unclosed ones run to the end, as a streaming reply may stop
inside one), indented blocks after a blank line, and inline code spans.
"""

from __future__ import annotations

import re

CJK_PUNCT = "，。！？；：、（）「」『』《》【】〈〉"
_SPACE_AFTER_PUNCT = re.compile(rf"([{CJK_PUNCT}])[ \t\u3000]+(?=\S)")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_CJK_START = re.compile(r"^[\u3400-\u4dbf\u4e00-\u9fff]")
_INDENTED = re.compile(r"^(?: {4}|\t)")
INDENT = "\u3000\u3000"


def blocks(text: str) -> list[tuple[bool, list[str]]]:
    """Split lines into (is_code, lines) runs: fenced blocks, indented blocks, prose."""
    lines = text.split("\n")
    out: list[tuple[bool, list[str]]] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            out.append((False, prose.copy()))
            prose.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = opened.group(1)
            code = [line]
            i += 1
            while i < len(lines):
                code.append(lines[i])
                closed = _FENCE_CLOSE.match(lines[i])
                i += 1
                if closed and closed.group(1)[0] == fence[0] and len(closed.group(1)) >= len(fence):
                    break
            flush()
            out.append((True, code))
            continue
        after_blank = not prose or not prose[-1].strip()
        if _INDENTED.match(line) and line.strip() and after_blank:
            code = [line]
            i += 1
            while i < len(lines):
                if lines[i].strip() and _INDENTED.match(lines[i]):
                    code.append(lines[i])
                    i += 1
                    continue
                j = i
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if j == i or j == len(lines) or not _INDENTED.match(lines[j]):
                    break
                code.extend(lines[i:j])  # blank lines inside the indented block are code too
                i = j
            flush()
            out.append((True, code))
            continue
        prose.append(line)
        i += 1
    flush()
    return out


def _fix_punct_spacing(line: str) -> str:
    """Remove the spaces after full-width punctuation, except inside inline code spans."""
    spans = [m.span() for m in _INLINE_CODE.finditer(line)]

    def keep_in_code(m: re.Match) -> str:
        return m.group(0) if any(a <= m.start() < b for a, b in spans) else m.group(1)

    return _SPACE_AFTER_PUNCT.sub(keep_in_code, line)


def _prose(lines: list[str], indent_cjk: bool) -> list[str]:
    out: list[str] = []
    for line in lines:
        if not line.strip():
            if out and out[-1] == "":
                continue  # one blank line between paragraphs is enough
            out.append("")
            continue
        line = _fix_punct_spacing(line)
        if indent_cjk and (not out or out[-1] == "") and _CJK_START.match(line):
            line = INDENT + line
        out.append(line)
    return out


def clean(text: str, indent_cjk_paragraphs: bool = False) -> str:
    """The reply as shown: same Markdown structure and code, tidier prose."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out: list[str] = []
    for is_code, lines in blocks(text):
        if is_code:
            out.extend(lines)
            continue
        for line in _prose(lines, indent_cjk_paragraphs):
            if line == "" and out and out[-1] == "":
                continue
            out.append(line)
    while out and not out[0].strip():
        out.pop(0)
    if out and blocks(out[0])[0][0] is False and len(out[0]) - len(out[0].lstrip(" ")) < 4:
        out[0] = out[0].lstrip(" ")  # " The answer…": Markdown ignores up to 3 leading spaces; 4 would be code
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)
