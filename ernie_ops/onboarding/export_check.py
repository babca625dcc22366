"""What `ernie-ops hr check FILE` checks (cli/hr.py prints it): is an HR export file fit to replace the one the onboarding helper reads?

It reads FILE with the export connector's own parsing (`export_file.numbered_rows`) and checks every
record the way a lookup would (`model.checked`: a department, a start date in a known format), plus
what only shows across records: a record nobody can be looked up by, a user_name or employee_number
on two records (a lookup finds only the first), a CSV line with more fields than the header, an
export without a single employee. A start date in the past is fine here: an export lists everyone.
Those whose onboarding window has passed (start + chat.onboarding.active_days before today: the helper
tells them onboarding is over) are listed under an info heading, as information, never as a problem.

The CLI prints the number of employees and that info (exit 0), or one sentence per bad record (exit 2). Ansible's copy runs
it as `validate:` on the new file before it replaces the installed one, so a broken export never
replaces a working one; `--format` and `--name` say what the temporary copy really is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from ernie_ops.errors import UsageError
from ernie_ops.hr.export_file import numbered_rows
from ernie_ops.hr.model import HRError, checked
from ernie_ops.onboarding.window import window

FORMATS = ("csv", "yaml")


@dataclass
class ExportReport:
    file: str
    format: str
    employees: int = 0
    problems: list[str] = field(default_factory=list)
    active_days: int | None = None
    outside_window: list[str] = field(default_factory=list)  # info: onboarding over for these records

    @property
    def ok(self) -> bool:
        return not self.problems


def file_format(path: str) -> str:
    """The format the connector reads a file in: YAML by a .yaml/.yml suffix, CSV otherwise."""
    return "yaml" if Path(path).suffix.lower() in (".yaml", ".yml") else "csv"


def _text(value: object) -> str:
    return str(value if value is not None else "").strip()


def check(
    path: str | Path, fmt: str | None = None, name: str | None = None, *, active_days: int | None = None, today: date | None = None
) -> ExportReport:
    """Every problem of the export at `path`, named after `name` (default: the path), and with `active_days`
    the good records whose onboarding window has passed on `today` (default: the real date). Raises UsageError
    when the file as a whole cannot be read (absent, not UTF-8, not YAML, a CSV header without the keys)."""
    shown = name or str(path)
    fmt = fmt or file_format(shown)
    try:
        rows = numbered_rows(Path(path), fmt)
    except HRError as exc:
        raise UsageError(exc.detail.replace(str(path), shown, 1) + "; fix the export and check it again") from None
    report = ExportReport(file=shown, format=fmt, employees=len(rows), active_days=active_days)
    today = today or date.today()
    seen: dict[tuple[str, str], str] = {}
    for where, row in rows:
        user_name, number = _text(row.get("user_name")), _text(row.get("employee_number"))
        who = f"{shown} {where}" + (f" (user_name {user_name!r})" if user_name else f" (employee_number {number!r})" if number else "")
        reasons = []
        if None in row and fmt == "csv":
            reasons.append(f"more fields than the header's {len(row) - 1} (quote a value that holds a comma)")
        if not user_name and not number:
            reasons.append("no user_name and no employee_number, so nobody can be looked up by this record")
        for key, value in (("user_name", user_name), ("employee_number", number)):
            if value and (key, value) in seen:
                reasons.append(f"{key} {value!r} is also on {seen[key, value]}, so a lookup would only find the first")
            elif value:
                seen[key, value] = where
        employee = None
        try:  # the connector's own checks (a start date in the past is not one)
            if user_name or number:
                employee = checked(who, user_name=user_name, employee_number=number, display_name=_text(row.get("display_name")),
                                   department=row.get("department"), title=row.get("title"), manager=row.get("manager"),
                                   start_date=row.get("start_date"))  # fmt: skip
        except HRError as exc:
            reasons.append(exc.detail.removeprefix(f"{who}: "))
        if reasons:
            report.problems.append(f"{who}: {'; '.join(reasons)}")  # one sentence per bad record
        elif employee is not None and active_days is not None:
            win = window(employee.start_date, today, active_days)
            if not win.serves:
                report.outside_window.append(
                    f"{who}: started {win.start.isoformat()}, onboarding ended {win.last_day.isoformat()}; the helper tells them it is over"
                )
    if not rows:
        report.problems.append(f"{shown}: no employee records; an empty export would make every onboarding lookup fail")
    return report
