"""The embedded HR connector: an HR export file (CSV or YAML), looked up by user_name or employee_number."""

from __future__ import annotations

import pytest

from ernie_ops.hr.export_file import ExportFileConnector
from ernie_ops.hr.model import Employee, HRError, parse_start_date
from tests.harness.dates import day


def today():
    return day(0)


def start():  # still to come: accepted
    return day(5)


HEADER = "user_name,employee_number,display_name,department,title,manager,start_date\n"


def zhang():
    return Employee("zhang.wei", "E1001", "张伟", "研发部", "后端工程师", "李娜", start())


def _csv(tmp_path, *rows: str, bom: bool = False):
    path = tmp_path / "hr.csv"
    path.write_text(("\ufeff" if bom else "") + HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return ExportFileConnector(path)


def row():
    return f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{start()}"


@pytest.mark.parametrize("bom", [False, True])
def test_csv_found_by_user_name_and_by_employee_number(tmp_path, bom):
    hr = _csv(tmp_path, f"li.na,E0007,李娜,研发部,经理,,{day(1)}", row(), bom=bom)
    assert hr.find(user_name="zhang.wei") == zhang()
    assert hr.find(employee_number="E1001") == zhang()


def test_yaml_found_and_its_native_dates_read(tmp_path):
    path = tmp_path / "hr.yaml"
    path.write_text(
        "employees:\n"
        "  - {user_name: zhang.wei, employee_number: E1001, display_name: 张伟, department: 研发部,\n"
        f"     title: 后端工程师, manager: 李娜, start_date: {start()}}}\n",
        encoding="utf-8",
    )
    hr = ExportFileConnector(path)
    assert hr.find(employee_number="E1001") == zhang()


def test_unknown_employee_is_not_found(tmp_path):
    with pytest.raises(HRError) as err:
        _csv(tmp_path, row()).find(user_name="nobody")
    assert err.value.kind == "not_found"
    assert "nobody" in err.value.detail and "nobody" not in err.value.message


def test_missing_department_is_incomplete(tmp_path):
    with pytest.raises(HRError) as err:
        _csv(tmp_path, f"zhang.wei,E1001,张伟,  ,后端工程师,李娜,{start()}").find(user_name="zhang.wei")
    assert err.value.kind == "incomplete"


@pytest.mark.parametrize("written", ["{d:%d.%m.%Y}", "next Monday", "2026-13-01", ""])  # {d}: a date to come, in an unknown format
def test_start_date_in_unknown_format_is_bad_date(tmp_path, written):
    with pytest.raises(HRError) as err:
        _csv(tmp_path, f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{written.format(d=start())}").find(user_name="zhang.wei")
    assert err.value.kind == "bad_date"


@pytest.mark.parametrize("ago", [1, 2000])
def test_a_start_date_in_the_past_is_a_record_like_any_other(tmp_path, ago):
    """An export lists everyone: whether onboarding still serves them is the window's business (onboarding/window.py)."""
    hr = _csv(tmp_path, f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{day(-ago)}")
    assert hr.find(user_name="zhang.wei").start_date == day(-ago)


def test_start_date_today_is_accepted(tmp_path):
    hr = _csv(tmp_path, f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{today()}")
    assert hr.find(user_name="zhang.wei").start_date == today()


@pytest.mark.parametrize("text", ["{d}", "{d:%Y/%m/%d}", "{d.year}年{d.month}月{d.day}日", "{d}T09:00:00Z", "{d}T09:00:00+08:00"])
def test_start_date_formats_hr_systems_write(text):
    assert parse_start_date(text.format(d=start()), "x") == start()


def test_missing_file_is_down_with_its_path(tmp_path):
    with pytest.raises(HRError) as err:
        ExportFileConnector(tmp_path / "absent.csv").find(user_name="zhang.wei")
    assert err.value.kind == "down"
    assert "absent.csv" in err.value.detail


def test_csv_without_key_columns_is_down_naming_them(tmp_path):
    path = tmp_path / "hr.csv"
    path.write_text("name,dept\nzhang.wei,研发部\n", encoding="utf-8")
    with pytest.raises(HRError) as err:
        ExportFileConnector(path).find(user_name="zhang.wei")
    assert err.value.kind == "down"
    assert "user_name" in err.value.detail and "employee_number" in err.value.detail


def test_non_utf8_file_is_down(tmp_path):
    path = tmp_path / "hr.csv"
    path.write_bytes((HEADER + row() + "\n").encode("gbk"))
    with pytest.raises(HRError) as err:
        ExportFileConnector(path).find(user_name="zhang.wei")
    assert err.value.kind == "down"
    assert "UTF-8" in err.value.detail


@pytest.mark.parametrize("text", ["employees: [unclosed\n", "just a string\n"])
def test_yaml_that_is_not_a_list_of_employees_is_down(tmp_path, text):
    path = tmp_path / "hr.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(HRError) as err:
        ExportFileConnector(path).find(user_name="zhang.wei")
    assert err.value.kind == "down"


def test_every_kind_has_a_bilingual_sentence_and_unknown_kinds_are_refused():
    for kind in ("down", "timeout", "unauthorized", "not_found", "incomplete", "bad_date"):
        message = HRError(kind, "d").message
        assert " / " in message and any("\u4e00" <= c <= "\u9fff" for c in message)
    with pytest.raises(ValueError):
        HRError("oops", "d")
