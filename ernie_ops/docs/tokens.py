"""The token text the index stores and the terms a question searches, for Chinese and English alike.

SQLite's FTS5 `unicode61` tokenizer splits on spaces and punctuation only, so a Chinese sentence without spaces is
one token and 年假 never matches 年假天数. The store therefore keeps a second column holding `index_text(text)`:
space-joined tokens made here, declared `tokenize='unicode61'`, and searches it with `fts_match(query_terms(q))`.

Tokenizers (`TOKENIZERS`):
- "whitespace": `text.lower().split()`, what common RAG stacks do by default (the baseline; a CJK run is one token).
- "bigram": each CJK run -> overlapping character bigrams (a 1-character run -> that character); other words lowercased.
- "unigram+bigram": as "bigram" plus every CJK character on its own.
- "jieba": CJK runs segmented into words by rjieba (the Rust port of jieba: the same words, ~20x faster), in search
  mode (a long word also gives its sub-words: 中华人民共和国 -> 中华 华人 人民 共和 共和国 中华人民共和国).
- "jieba+bigram": the jieba words plus the bigrams (two-character words are bigrams already and are not repeated).

All input is NFKC-normalised first (full-width Ｖ８０００ -> v8000) and lowercased. Non-CJK words are runs of letters or
digits; a compound such as `site.yml`, `v1.2.3`, `ops@example.com`, `end-to-end`, `max_body_size` or `c++` is kept
whole as well as in its parts, and so is a camelCase or PascalCase identifier (`livenessProbe` -> livenessprobe, liveness,
probe; `GlobalProtect` -> globalprotect, global, protect; `HTTPServer` -> httpserver, http, server): the case is read
before lowercasing, ASCII letters only. Index and question are tokenised alike, so `liveness probe` finds `livenessProbe`
and `livenessProbe` still finds itself first (it matches the whole token and the parts). No stemming is done here:
the store may declare `tokenize='porter unicode61'` to stem English words (the porter step leaves CJK tokens alone),
the same on both sides.

FTS safety: a token never holds a character `unicode61` splits on. Punctuation inside a token (`c++`, `site.yml`, a
whitespace token like `配置。`) is mapped to a private-use character, which unicode61 treats as part of a word; letters
and digits stay as they are (unicode61 folds case and diacritics the same way on both sides). `fts_match` quotes each
term as an FTS5 string, so nothing a user types is read as FTS5 syntax.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable
from functools import cache

from ernie_ops.errors import ErnieOpsError

TOKENIZERS: tuple[str, ...] = ("whitespace", "bigram", "unigram+bigram", "jieba", "jieba+bigram")

MAX_QUERY_TERMS = 64  # a pasted page as a question must not become a thousand-term OR query

# Han (incl. extensions and compatibility ideographs), kana (not the ・ between words), Hangul: written without spaces.
_CJK_CHARS = "\u3040-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
_WORD_CHARS = rf"[^\W_{_CJK_CHARS}]"  # a letter or digit that is not CJK
_JOIN = r"[._\-/@']"  # joins words into a compound: site.yml v1.2.3 a@b.c end-to-end it's
_PIECE = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>{_WORD_CHARS}+(?:{_JOIN}{_WORD_CHARS}+)*(?:[+#]+(?!{_WORD_CHARS}))?)")
_PART = re.compile(rf"{_WORD_CHARS}+")
_HAS_ALNUM = re.compile(r"[^\W_]")
_UNSAFE = re.compile(r"[\W_]")  # what unicode61 would split a token on (anything but letters and digits)

# Chinese function words and question words; content words such as 年假, 申请, 配置 are never here.
_STOP_ZH = (
    "的 地 得 了 着 过 是 吗 呢 吧 啊 呀 嘛 么 哦 在 和 与 及 或 也 都 就 还 又 把 被 对 给 从 向 有 没有 "
    "什么 怎么 怎样 怎么样 如何 为什么 为何 哪 哪些 哪个 哪里 哪儿 几 多少 请问 请 一下 "
    "我 我们 你 你们 您 他 她 它 他们 这 那 这个 那个 这些 那些"
)
# English function words and question words.
_STOP_EN = (
    "a an the of to in on at by for from with about as into and or but if then than so "
    "is are was were be been being am do does did done have has had can could should would will shall may might must "
    "how what which who whom whose where when why please tell me my i you your we our us it its this that these those "
    "there here any some"
)
STOP_WORDS: frozenset[str] = frozenset(_STOP_ZH.split() + _STOP_EN.split())


_FULL_WIDTH = re.compile("[\uff01-\uff5e]+")
_FULL_WIDTH_TO_ASCII = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}


def _normalise(text: str, *, lower: bool = True) -> str:
    """NFKC, lowercased unless `lower` is False (the camelCase split reads the case first). Full-width ASCII (，：Ｖ８)
    is mapped first: NFKC itself is slow on text it must change (~0.2 s per MB of Chinese) and fast on text that is
    already normal, which Chinese text then mostly is."""
    text = _FULL_WIDTH.sub(lambda m: m.group().translate(_FULL_WIDTH_TO_ASCII), text)
    text = unicodedata.normalize("NFKC", text)
    return text.lower() if lower else text


def _pua(ch: str) -> str:
    """A private-use character standing for `ch` (unicode61 keeps private-use characters inside words)."""
    cp = ord(ch)
    return chr(0xE000 + cp) if cp < 0x1900 else chr(0xF0000 + cp % 0xFFFE)


def _safe(token: str) -> str:
    if token.isalnum():
        return token
    return _UNSAFE.sub(lambda m: _pua(m.group()), token)


@cache
def _segmenter() -> tuple[Callable[[str], list[str]], Callable[[str], list[str]]]:
    """(plain cut, search-mode cut) from rjieba, loaded on first use so that importing this module stays cheap.
    rjieba, not jieba: the same words (checked on 1 MB of mixed text), 18-23x faster, no 1.3 s dictionary load."""
    try:
        import rjieba
    except ImportError:
        raise ErnieOpsError("the 'jieba' tokenizers need the rjieba package: install it, or choose the 'bigram' tokenizer") from None
    return rjieba.cut, rjieba.cut_for_search


def _bigrams(run: str) -> list[str]:
    if len(run) < 2:
        return [run]
    return [a + b for a, b in itertools.pairwise(run)]


def _cjk_tokens(run: str, tokenizer: str) -> list[str]:
    if tokenizer == "bigram":
        return _bigrams(run)
    if tokenizer == "unigram+bigram":
        return list(run) + _bigrams(run) if len(run) > 1 else [run]
    words = _segmenter()[1](run)
    if tokenizer == "jieba":
        return words
    return _bigrams(run) + [w for w in words if len(w) != 2]  # jieba+bigram


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z]{2})")  # livenessProbe  HTTPServer  md5Sum (not IPv6)


def _camel_parts(part: str) -> list[str]:
    """The lowercased words of a camelCase part (livenessProbe -> liveness, probe), [] when it is one word."""
    if part.islower() or part.isupper() or not part.isascii():
        return []
    words = [w.lower() for w in _CAMEL.split(part) if w]
    return words if len(words) > 1 else []


def _word_tokens(word: str) -> list[str]:
    """A non-CJK word (original case) -> the lowercased word, plus its parts when it is a compound or camelCase."""
    lowered = word.lower()
    if word.isalnum():
        camel = _camel_parts(word)
        return [lowered, *camel] if camel else [lowered]
    parts = _PART.findall(word)
    if len(parts) == 1 and parts[0] == word:
        return [lowered]
    out = [_safe(lowered)]
    for part in parts:
        out.append(part.lower())
        out += _camel_parts(part)
    return out


def _check(tokenizer: str) -> None:
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}: use one of {', '.join(TOKENIZERS)}")


def tokenize(text: str, tokenizer: str) -> list[str]:
    """The tokens of `text` in order, with repeats (what the index counts)."""
    _check(tokenizer)
    if tokenizer == "whitespace":
        return [_safe(t) for t in _normalise(text).split()]
    out: list[str] = []
    for m in _PIECE.finditer(_normalise(text, lower=False)):
        piece = m.group()
        if m.lastgroup == "cjk":
            out += _cjk_tokens(piece, tokenizer)
        elif piece.isalnum() and piece.islower():  # the common case: a plain lowercase word, nothing to split
            out.append(piece)
        else:
            out += _word_tokens(piece)
    return out


def index_text(text: str, tokenizer: str) -> str:
    """Space-joined tokens to store in an FTS5 column declared `tokenize='unicode61'`."""
    return " ".join(tokenize(text, tokenizer))


def _is_stop(token: str) -> bool:
    return token in STOP_WORDS


def _query_cjk(run: str, tokenizer: str) -> list[str]:
    """A question's CJK run without its function words: 年假怎么申请 -> 年假 申请, not 假怎 么申."""
    if tokenizer == "jieba":
        return [t for t in _cjk_tokens(run, tokenizer) if not _is_stop(t)]
    try:
        pieces = _segmenter()[0](run) if len(run) > 1 else [run]
    except ErnieOpsError:
        pieces = _split_stop_greedy(run)
    runs, current = [], ""
    for w in pieces:
        if _is_stop(w):
            if current:
                runs.append(current)
            current = ""
        else:
            current += w
    if current:
        runs.append(current)
    return [t for r in runs for t in _cjk_tokens(r, tokenizer)]


_STOP_BY_LENGTH = sorted((w for w in STOP_WORDS if len(w) > 1 and re.fullmatch(f"[{_CJK_CHARS}]+", w)), key=len, reverse=True)


def _split_stop_greedy(run: str) -> list[str]:
    """Without a segmenter: cut out multi-character stop words only (a single 的 may be part of 目的)."""
    pieces, i, plain = [], 0, ""
    while i < len(run):
        for w in _STOP_BY_LENGTH:
            if run.startswith(w, i):
                if plain:
                    pieces.append(plain)
                pieces.append(w)
                plain, i = "", i + len(w)
                break
        else:
            plain += run[i]
            i += 1
    if plain:
        pieces.append(plain)
    return pieces


def query_terms(text: str, tokenizer: str, *, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """The distinct index tokens of a question, in order, without stop words or punctuation (at most `limit`)."""
    _check(tokenizer)
    if tokenizer == "whitespace":
        tokens = [_safe(t) for t in _normalise(text).split() if _HAS_ALNUM.search(t)]  # punctuation-only tokens are not terms
    else:
        tokens = []
        for m in _PIECE.finditer(_normalise(text, lower=False)):
            if m.lastgroup == "cjk":
                tokens += _query_cjk(m.group(), tokenizer)
            elif not _is_stop(m.group().lower()):
                tokens += _word_tokens(m.group())
    seen: dict[str, None] = {}
    for t in tokens:
        if t and not _is_stop(t):
            seen.setdefault(t)
            if len(seen) >= limit:
                break
    return list(seen)


def words(text: str) -> list[str]:
    """The words of a text as a reader sees them, in order, with stop words and repeats, lowercased: a CJK run cut by
    rjieba (without it: multi-character stop words cut out, the rest one word), other words whole (`wi-fi`, `c++`).
    For judging a question's own content (retrieve's follow-up detection), not for indexing."""
    out: list[str] = []
    for m in _PIECE.finditer(_normalise(text)):
        if m.lastgroup != "cjk":
            out.append(m.group())
            continue
        try:
            out += _segmenter()[0](m.group()) if len(m.group()) > 1 else [m.group()]
        except ErnieOpsError:
            out += _split_stop_greedy(m.group())
    return out


def fts_match(terms: list[str]) -> str:
    """An FTS5 MATCH expression: each term a quoted string, OR-joined; '' when there is nothing to search
    (the caller must then not run MATCH at all: FTS5 rejects an empty expression)."""
    cleaned = (t.replace("\x00", "") for t in terms)  # SQLite reads the expression only up to a NUL
    quoted = ['"' + t.replace('"', '""') + '"' for t in dict.fromkeys(cleaned) if t.strip()]
    return " OR ".join(quoted)
