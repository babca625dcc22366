"""The embedded default HR connector: an HR export file (CSV or YAML) for sites without an HR API.

CSV: a header row with user_name, employee_number, display_name, department, title, manager, start_date
(UTF-8, a BOM tolerated). YAML: a list of mappings with the same keys (or `{employees: [...]}`).
The file is read on each lookup, so HR can replace it without a restart.
"""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from ernie_ops.hr.model import Employee, HRError, checked

COLUMNS = ("user_name", "employee_number", "display_name", "department", "title", "manager", "start_date")


def numbered_rows(path: Path, fmt: str | None = None) -> list[tuple[str, dict]]:
    """The export's employee records, each with where it is ("line 4" of a CSV, "entry 3" of a YAML list).

    `fmt` ("csv" or "yaml") overrides the format the file's suffix gives (`ernie-ops hr check` reads a
    temporary copy). Raises HRError("down") when the file as a whole cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise HRError("down", f"{path}: the HR export file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HRError("down", f"{path}: the HR export file cannot be read as UTF-8 ({exc})") from None
    if (fmt or ("yaml" if path.suffix.lower() in (".yaml", ".yml") else "csv")) == "yaml":
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise HRError("down", f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if isinstance(data, dict):
            data = data.get("employees")
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise HRError("down", f"{path}: expected a list of employee mappings (or employees: [...])")
        return [(f"entry {n}", row) for n, row in enumerate(data, 1)]
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in ("user_name", "employee_number") if c not in (reader.fieldnames or [])]
    if missing:
        raise HRError("down", f"{path}: the CSV header lacks {', '.join(missing)}; expected columns {', '.join(COLUMNS)}")
    return [(f"line {reader.line_num}", row) for row in reader]


def _rows(path: Path) -> list[dict]:
    return [row for _, row in numbered_rows(path)]


class ExportFileConnector:
    def __init__(self, path: Path):
        self.path = Path(path)

    def find(self, *, user_name: str | None = None, employee_number: str | None = None) -> Employee:
        if bool(user_name) == bool(employee_number):
            raise ValueError("find() takes exactly one of user_name, employee_number")
        field, wanted = ("user_name", user_name) if user_name else ("employee_number", employee_number)
        for row in _rows(self.path):
            if str(row.get(field) or "").strip() == wanted:
                who = f"{self.path}: {field} {wanted!r}"
                return checked(
                    who,
                    user_name=str(row.get("user_name") or "").strip(),
                    employee_number=str(row.get("employee_number") or "").strip(),
                    display_name=str(row.get("display_name") or "").strip(),
                    department=row.get("department"),
                    title=row.get("title"),
                    manager=row.get("manager"),
                    start_date=row.get("start_date"),
                )
        raise HRError("not_found", f"{self.path}: no employee with {field} {wanted!r}")
