"""The operator's feedback report (`ernie-ops chat feedback [--since 7d] [--json]`): pure functions from the
store's FeedbackRow list to rows with what it takes to find a bad answer: when, who, 👍/👎, the comment, the
question, the answer and the sources shown with it (Docs Q&A: the passages' names and titles).

Durations: `7d`, `24h`, `30m`, `2w` (ernie_ops/durations.py, the one parser).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ernie_ops import durations
from ernie_ops.errors import UsageError
from ernie_ops.threads.store import FeedbackRow

UP, DOWN = "👍", "👎"


@dataclass(frozen=True)
class ReportRow:
    when: datetime
    user: str
    rating: str  # 👍 / 👎
    value: int
    comment: str
    question: str
    answer: str
    sources: list[str]
    thread_id: str
    thread_name: str


def parse_since(text: str) -> timedelta:
    """'7d' -> 7 days; also w (weeks), h (hours), m (minutes)."""
    value = durations.seconds(text, ("w", "d", "h", "m"), bare=False, whole=True)
    if not value:
        raise UsageError(f"--since '{text}' is not a duration; write a number with w, d, h or m (e.g. 7d, 24h, 30m)")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise UsageError(f"--since '{text}' reaches further back than any date") from None


def rating(value: int) -> str:
    """Chainlit's feedback value: 1 thumbs up, 0 thumbs down."""
    return UP if value > 0 else DOWN


def step_text(step: dict | None) -> str:
    """What the step showed: a message's output (a user message keeps its text there too), else its input."""
    if not step:
        return ""
    for key in ("output", "input"):
        value = step.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def source_label(element: dict, text: str | None) -> str:
    """'【1】 handbook.pdf p.3': the element's name and the first line of what it showed (a passage's title)."""
    name = str(element.get("name") or element.get("id") or "?")
    first = next((line.strip().strip("*").strip() for line in (text or "").splitlines() if line.strip()), "")
    return f"{name} {first}" if first and first != name else name


def report(rows: list[FeedbackRow]) -> list[ReportRow]:
    return [
        ReportRow(
            when=r.updated_at,
            user=r.user or "(unknown)",
            rating=rating(r.value),
            value=r.value,
            comment=r.comment or "",
            question=step_text(r.question),
            answer=step_text(r.step),
            sources=[source_label(e, r.texts.get(str(e.get("id")))) for e in r.elements],
            thread_id=r.thread_id,
            thread_name=r.thread_name or "",
        )
        for r in rows
    ]


def as_json(rows: list[ReportRow]) -> list[dict]:
    """One object per feedback, times in ISO 8601 UTC, for scripts (`--json`)."""
    return [
        {
            "when": r.when.isoformat(),
            "user": r.user,
            "value": r.value,
            "rating": "up" if r.value > 0 else "down",
            "comment": r.comment,
            "question": r.question,
            "answer": r.answer,
            "sources": r.sources,
            "thread_id": r.thread_id,
            "thread_name": r.thread_name,
        }
        for r in rows
    ]


def shorten(text: str, limit: int) -> str:
    """One line of at most `limit` characters (a table cell), '…' where cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
