"""Follow-up questions: a message that leans on the conversation ("那它能顺延到明年吗？", "And what about staging?")
names little or nothing of its subject, so searching it alone finds passages about 顺延 or staging in general. Such a
message is searched together with the question(s) it follows (retrieve.Retriever fuses that search with the
message's own); a self-contained question is searched alone, so a change of subject is not pulled back to the old one.

Deterministic and model-free. A message is a follow-up of the previous user question when
- it has no content words of its own (只剩疑问词: "多久？", "Why?"), or
- it refers back or continues (它/其/该/这/那…, a closing 呢, "it/they/that/those…", an opening "and/what about…")
  AND has at most MAX_OWN_WORDS content words: a long question that happens to contain "it" ("Is it OK to write
  customer phone numbers to the log?") says what it is about.
Content words: tokens.words() without stop words, the referring words and FILLER (question and helper words). The
limits were set on the golden set's follow_ups and topic_switches (benchmarks/docs_quality.py, follow-up table).
A follow-up's own previous question may itself have been a follow-up ("那它能顺延吗？" -> "要审批吗？"): the context
goes back through such a chain to the question that named the subject, at most MAX_CONTEXT questions.
"""

from __future__ import annotations

from collections.abc import Sequence

from ernie_ops.docs import tokens

MAX_OWN_WORDS = 3  # "那新能源车也收这个钱吗" weighs 2.5 (新能源 车 收 钱), "Does the team lead have to approve it?" 3
MAX_CONTEXT = 3  # previous questions a chain of follow-ups may reach back through

# Words that point back at something said before: pronouns and demonstratives.
_REFER_ZH = "它 它们 其 其中 该 此 这 那 这个 那个 这些 那些 这里 那里 这样 那样 这种 那种 这项 那项 上述 以上 同样"
REFER_ZH = frozenset(_REFER_ZH.split())
_REFER_EN = "it its they them their theirs this that these those there one ones he she him her his such same"
REFER_EN = frozenset(_REFER_EN.split())
# Openers that continue the previous question with another case.
OPEN_ZH = ("那", "那么", "还有", "另外", "如果", "要是", "那如果")
OPEN_EN = (("and",), ("what", "about"), ("how", "about"), ("what", "if"), ("also",), ("then",), ("but",))
RELATIVE_EN = frozenset(("that", "which"))  # after a noun they start a relative clause
EXISTENTIAL_EN = frozenset(("is", "are", "was", "were", "be"))  # "is there", "are there"
CLOSE_ZH = "呢"  # "Mac 上呢？": the same question about something else
# Question and helper words that say nothing about the subject (besides tokens.STOP_WORDS).
_FILLER = (
    "能 会 可以 可 要 需要 应该 该怎么 怎么办 办 多久 多长 时间 谁 吗 最多 最少 一下 还是 是否 是不是 有没有 能不能 会不会 要不要 "
    "的话 去 "
    "long often many much need needs get gets go goes happen happens happened does don't doesn't isn't can't won't "
    "ok okay else too also still just again way well then through over under down up out off without around"
)
FILLER = frozenset(_FILLER.split())


def _is_content(word: str) -> bool:
    if word in tokens.STOP_WORDS or word in REFER_ZH or word in REFER_EN or word in FILLER:
        return False
    return any(ch.isalnum() for ch in word)


def own_words(message: str) -> list[str]:
    """The message's content words: what it says about its subject itself."""
    return [w for w in tokens.words(message) if _is_content(w)]


def own_weight(words: Sequence[str]) -> float:
    """How much the content words say: a single CJK character (车, 钱, 收) half a word, being mostly a part of one."""
    return sum(0.5 if len(w) == 1 and not w.isascii() else 1.0 for w in words)


def refers_back(message: str) -> bool:
    """The message points back (a pronoun or demonstrative) or continues the previous question (an opener, a closing 呢)."""
    ws = [w for w in tokens.words(message) if any(ch.isalnum() for ch in w)]
    if not ws:
        return False
    for i, w in enumerate(ws):
        if w in RELATIVE_EN and i and _is_content(ws[i - 1]):
            continue  # "a computer that has a virus": a relative clause, not a pointer back
        if w == "there" and i and ws[i - 1] in EXISTENTIAL_EN:
            continue  # "Is there a dress code?": nothing is pointed at
        if w in REFER_ZH or w in REFER_EN:
            return True
    text = message.strip(" \t\n？?。.!！")
    if text.startswith(OPEN_ZH) or text.endswith(CLOSE_ZH):
        return True
    return any(tuple(ws[: len(opener)]) == opener for opener in OPEN_EN)


def is_follow_up(message: str) -> bool:
    """Whether the message leans on an earlier question (see the module's docstring)."""
    own = own_words(message)
    return not own or (own_weight(own) <= MAX_OWN_WORDS and refers_back(message))


def context(message: str, previous: Sequence[str]) -> list[str]:
    """The earlier questions (oldest first) to search `message` with; [] when it is self-contained or there are none.
    `previous`: this conversation's earlier user questions, oldest first."""
    earlier = [p for p in previous if p.strip()]
    if not earlier or not is_follow_up(message):
        return []
    chain = [earlier[-1]]
    for before in reversed(earlier[:-1]):
        if len(chain) >= MAX_CONTEXT or not is_follow_up(chain[0]):
            break
        chain.insert(0, before)
    return chain
