"""When the onboarding helper serves an employee: from before the start date (pre-boarding, however far
ahead HR wrote it) through `chat.onboarding.active_days` days after it, both ends included. An HR export
lists everyone, so most records in it started long ago: that is not a wrong record, onboarding is simply
over for them, and the helper says so in one polite sentence instead of showing the plan.

Pure date arithmetic; the service passes today's date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from ernie_ops.errors import ErnieOpsError
from ernie_ops.onboarding.plan import zh_date


@dataclass(frozen=True)
class Window:
    start: date
    last_day: date  # start + active_days: the last day the helper serves
    phase: str  # "preboarding" (the start is still to come) | "active" | "over"

    @property
    def serves(self) -> bool:
        return self.phase != "over"


def window(start: date, today: date, active_days: int) -> Window:
    """Where `today` falls for an employee who starts (or started) on `start`."""
    if active_days < 0:
        raise ValueError(f"active_days must be 0 or more, not {active_days}")
    last = start + timedelta(days=active_days)
    phase = "preboarding" if today < start else "active" if today <= last else "over"
    return Window(start, last, phase)


def over_message(name: str, win: Window, manager: str | None) -> str:
    """The polite sentence for someone whose onboarding window has passed: when it ended and who to ask."""
    who_zh = f"你的直属上级{manager}" if manager else "人事部门"
    who_en = f"your manager, {manager}" if manager else "HR"
    return (
        f"{name}，你好！你的入职引导已于{zh_date(win.last_day)}结束（入职日期 {zh_date(win.start)}），入职助手不再推送事项。"
        f"如有问题，请联系{who_zh}。"
        f" / Hello {name}, your onboarding ended on {win.last_day.isoformat()} (start date {win.start.isoformat()}); "
        f"for any question, please ask {who_en}."
    )


class OnboardingOver(ErnieOpsError):
    """The employee's onboarding window has passed: `message` is the polite sentence for the chat."""

    def __init__(self, employee: str, name: str, win: Window, manager: str | None):
        self.employee, self.window = employee, win
        self.message = over_message(name, win, manager)
        super().__init__(f"{employee}: onboarding ended on {win.last_day.isoformat()} (start date {win.start.isoformat()})")
