"""The employee record an HR connector returns, the one error it raises, and the checks both connectors share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime

from ernie_ops.errors import ErnieOpsError

KINDS = ("down", "timeout", "unauthorized", "not_found", "incomplete", "bad_date")

# One friendly sentence per kind for the chat (Chinese / English); the detail goes to the log only.
_MESSAGES = {
    "down": (
        "人事系统暂时无法连接，请稍后再试。",
        "The HR system cannot be reached right now; please try again later.",
    ),
    "timeout": (
        "人事系统响应超时，请稍后再试。",
        "The HR system did not answer in time; please try again later.",
    ),
    "unauthorized": (
        "入职助手无权访问人事系统，请联系管理员。",
        "The onboarding helper may not read the HR system; please tell the administrator.",
    ),
    "not_found": (
        "在人事系统中找不到您的记录，请联系人事部门。",
        "Your record was not found in the HR system; please contact HR.",
    ),
    "incomplete": (
        "您的人事记录缺少部门信息，请联系人事部门补全。",
        "Your HR record has no department; please ask HR to complete it.",
    ),
    "bad_date": (
        "您的人事记录中的入职日期有误，请联系人事部门核对。",
        "The start date in your HR record is wrong; please ask HR to check it.",
    ),
}


class HRError(ErnieOpsError):
    """The HR system could not tell who the employee is. `message` is for the chat, `detail` for the log."""

    def __init__(self, kind: str, detail: str):
        if kind not in KINDS:
            raise ValueError(f"unknown HRError kind {kind!r}; one of {', '.join(KINDS)}")
        self.kind = kind
        self.message = " / ".join(_MESSAGES[kind])
        self.detail = detail
        super().__init__(f"{self.message} ({detail})")


@dataclass(frozen=True)
class Employee:
    user_name: str
    employee_number: str
    display_name: str
    department: str
    title: str
    manager: str
    start_date: date


_FORMATS = (
    re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})"),
    re.compile(r"(?P<y>\d{4})/(?P<m>\d{1,2})/(?P<d>\d{1,2})"),
    re.compile(r"(?P<y>\d{4})年(?P<m>\d{1,2})月(?P<d>\d{1,2})日"),
)


def parse_start_date(value: object, who: str) -> date:
    """A start date as HR systems write it: YYYY-MM-DD, an ISO date-time, YYYY/MM/DD or YYYY年M月D日."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    text = str(value or "").strip()
    if not text:
        raise HRError("bad_date", f"{who}: no start date")
    if "T" in text:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).date()
        except ValueError:
            pass
    for pattern in _FORMATS:
        match = pattern.fullmatch(text)
        if match:
            try:
                return date(int(match["y"]), int(match["m"]), int(match["d"]))
            except ValueError:
                break
    raise HRError("bad_date", f"{who}: start date {text!r} is not a date (expected YYYY-MM-DD, YYYY/MM/DD or YYYY年M月D日)")


def checked(
    who: str,
    *,
    user_name: str,
    employee_number: str,
    display_name: str,
    department: object,
    title: object,
    manager: object,
    start_date: object,
) -> Employee:
    """An Employee from a record's raw fields, or the HRError that says what is wrong with it. A start date
    in the past is a record like any other (an export lists everyone): whether the helper still serves
    that employee is the onboarding window's business (onboarding/window.py), not a fault of the record."""
    if not str(department or "").strip():
        raise HRError("incomplete", f"{who}: the record has no department")
    start = parse_start_date(start_date, who)
    return Employee(
        user_name=user_name,
        employee_number=employee_number,
        display_name=display_name or user_name,
        department=str(department).strip(),
        title=str(title or "").strip(),
        manager=str(manager or "").strip(),
        start_date=start,
    )
