"""Sections -> passages made of whole sentences, in Chinese and English, with offsets back into the section.

A sentence ends:
- after 。！？；… (full-width marks end a sentence wherever they are), or after . ! ? and ... when whitespace or the
  end of the text follows: a '.' inside 3.14, v1.2.3 or site.yml ends nothing;
- not after an abbreviation ('e.g.', 'i.e.', 'U.S.', 'Mr.', 'vs.' ...) nor after a list number at the start of a
  line ('1. Install ...');
- with the closing quotes and brackets that follow the mark (。」 ." .) ）);
- at every newline.
A span excludes the whitespace around the sentence: text[start:end] is the sentence, stripped and never empty.

A passage (`Chunk`) is a run of consecutive sentences of one section, at most `size` characters from the first
sentence's start to the last one's end; so `section.text[chunk.start:chunk.end] == chunk.text`, exactly, and
`chunk.text` has no leading or trailing whitespace. A sentence longer than `size` is cut at the last whitespace or
punctuation before `size` (hard at `size` if there is none). Consecutive passages share whole trailing sentences of at
most `overlap` characters. A passage never spans two sections: never two PDF pages, never two heading paths.
"""

from __future__ import annotations

import re

from ernie_ops.docs.model import Chunk, Section

# Provisional: 400 characters is ~250-400 model tokens of Chinese, ~100 words of English; six of them fit the prompt
# of a small model with room for the history. The benchmark decides the final values.
DEFAULT_SIZE = 400
DEFAULT_OVERLAP = 80

_CLOSERS = "\"'”’」』）)】》〉]}"
_BOUNDARY = re.compile(rf"\n|[。！？；…]+[{re.escape(_CLOSERS)}]*|[.!?]+[{re.escape(_CLOSERS)}]*")
_STRONG = re.compile(r"[。！？；…]")
_ABBREVIATIONS = frozenset(
    (
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "cf",
        "fig",
        "figs",
        "no",
        "nos",
        "nr",
        "approx",
        "incl",
        "resp",
        "al",
        "ca",
        "esp",
    )
)
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # e.g  i.e  U.S
_WORD_WINDOW = 32
_CUT_AFTER = re.compile(r"[\s,，、:：;；)）\]】」』”'\"-]")


def _ends_sentence(text: str, m: re.Match[str]) -> bool:
    mark = m.group()
    if mark == "\n" or _STRONG.search(mark):
        return True
    after = m.end()
    if after < len(text) and not text[after].isspace():
        return False  # 3.14  v1.2.3  site.yml  a?b
    if mark != ".":
        return True
    # The word before the mark, looked for within a short window: CJK text has no spaces to stop a longer search.
    window = max(0, m.start() - _WORD_WINDOW)
    word_start = max(text.rfind(" ", window, m.start()), text.rfind("\t", window, m.start()), text.rfind("\n", window, m.start())) + 1
    if word_start == 0 and window > 0:
        return True  # a 'word' longer than any abbreviation or list number
    word = text[word_start : m.start()].lstrip("(\"'")
    if _INITIALS.fullmatch(word) or word.lower() in _ABBREVIATIONS:
        return False
    if word.isdigit():  # '1. Install' at a line start is a list item, not a sentence
        i = word_start
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        return not (i == 0 or text[i - 1] == "\n")
    return True


def split_sentences(text: str) -> list[tuple[int, int]]:
    """The sentences of `text` as (start, end) spans, in order, whitespace around each excluded."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if _ends_sentence(text, m):
            end = m.start() if m.group() == "\n" else m.end()
            _add_stripped(text, start, end, spans)
            start = m.end()
    _add_stripped(text, start, len(text), spans)
    return spans


def _add_stripped(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        spans.append((start, end))


def _pieces(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """A sentence longer than `size` cut at the last whitespace/punctuation before `size`, else hard at `size`."""
    out: list[tuple[int, int]] = []
    while end - start > size:
        cut = start + size
        for i in range(start + size - 1, start, -1):
            if _CUT_AFTER.match(text, i):
                cut = i + 1
                break
        _add_stripped(text, start, cut, out)
        start = cut
    _add_stripped(text, start, end, out)
    return out


def _check(size: int, overlap: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"chunk size must be a positive number of characters, not {size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be a number of characters from 0 to below the size ({size}), not {overlap!r}")


def _passages(units: list[tuple[int, int]], size: int, overlap: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and units[j][1] - units[i][0] <= size:
            j += 1
        out.append((units[i][0], units[j - 1][1]))
        if j == len(units):
            break
        # Next passage: the trailing sentences of this one that fit in `overlap` (and leave room for sentence j).
        k = j
        while k - 1 > i and units[j - 1][1] - units[k - 1][0] <= overlap and units[j][1] - units[k - 1][0] <= size:
            k -= 1
        i = k
    return out


def chunk(sections: list[Section], size: int = DEFAULT_SIZE, overlap: int = DEFAULT_OVERLAP) -> list[Chunk]:
    """Passages of at most `size` characters from whole sentences, overlapping by up to `overlap` characters."""
    _check(size, overlap)
    chunks: list[Chunk] = []
    for index, section in enumerate(sections):
        text = section.text
        units = [p for s, e in split_sentences(text) for p in _pieces(text, s, e, size)]
        for start, end in _passages(units, size, overlap):
            chunks.append(Chunk(text=text[start:end], section=index, start=start, end=end, page=section.page, heading=section.heading))
    return chunks
