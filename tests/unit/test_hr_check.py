"""`ernie-ops hr check FILE` through the real CLI entry point, on real export files in a temporary directory:
the number of employees, or one sentence per bad record and exit 2 (Ansible's `validate:` relies on it)."""

from __future__ import annotations

import json

import pytest

from ernie_ops import cli
from ernie_ops.hr.export_file import ExportFileConnector
from tests.harness.dates import day

HEADER = "user_name,employee_number,display_name,department,title,manager,start_date\n"


def start():
    return day(5)


def long_ago():
    return day(-2000)


def zhang():
    return f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{start()}"


def li():  # started long ago: fine in an export
    return f"li.na,E0007,李娜,研发部,经理,,{long_ago()}"


def _csv(tmp_path, *rows: str, name: str = "hr.csv", bom: bool = False):
    path = tmp_path / name
    path.write_text(("\ufeff" if bom else "") + HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["hr", "check", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture(autouse=True)
def no_config(tmp_path, monkeypatch):
    """No config by default: the window is the built-in chat.onboarding.active_days (a test that wants one writes it)."""
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("bom", [False, True])
def test_a_good_csv_export_prints_its_number_of_employees(tmp_path, capsys, bom):
    path = _csv(tmp_path, zhang(), li(), bom=bom)
    code, out, err = run(capsys, path)
    assert (code, out.splitlines()[0], err) == (0, f"{path}: 2 employees (csv)", "")


def test_people_past_the_onboarding_window_are_info_not_errors(tmp_path, capsys):
    """An export lists everyone: those who started before the window are listed under an info heading, exit 0;
    the start day, day 2 and the last day of the (default 30-day) window are not listed."""
    rows = [f"u{n},E{n},N{n},研发部,t,,{day(n)}" for n in (0, -1, -30)]
    path = _csv(tmp_path, zhang(), *rows, f"late,E31,迟,研发部,t,,{day(-31)}", li())
    code, out, err = run(capsys, path)
    assert code == 0 and err == "", err
    assert out.splitlines() == [
        f"{path}: 6 employees (csv)",
        "info: 2 employees past the onboarding window (start + 30 days):",
        f"info:   {path} line 6 (user_name 'late'): started {day(-31)}, onboarding ended {day(-1)}; the helper tells them it is over",
        f"info:   {path} line 7 (user_name 'li.na'): started {long_ago()}, onboarding ended {day(-1970)}; the helper tells them it is over",
    ]
    report = json.loads(run(capsys, path, "--json")[1])
    assert report["ok"] is True and report["problems"] == [] and len(report["outside_window"]) == 2


def test_the_window_comes_from_the_option_else_the_config(tmp_path, capsys, monkeypatch):
    path = _csv(tmp_path, f"a,E1,A,研发部,t,,{day(-3)}", f"b,E2,B,研发部,t,,{day(-10)}")
    _, out, _ = run(capsys, path, "--active-days", "2")
    assert "info: 2 employees past the onboarding window (start + 2 days):" in out
    cfg = tmp_path / "ernie.yaml"
    cfg.write_text("chat:\n  onboarding:\n    active_days: 5\n", encoding="utf-8")
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(cfg))
    code, out, _ = run(capsys, path)
    assert code == 0 and "info: 1 employee past the onboarding window (start + 5 days):" in out and "'b'" in out
    code, _, err = run(capsys, path, "--active-days", "-1")
    assert code == 2 and "--active-days -1: must be 0 or more" in err


def test_an_export_with_errors_still_lists_the_info_and_exits_2(tmp_path, capsys):
    path = _csv(tmp_path, li(), f"x,E9,X,,t,,{start()}")
    code, out, err = run(capsys, path)
    assert code == 2 and "info: 1 employee past the onboarding window" in out and "the record has no department" in err


def test_a_good_yaml_export_in_either_shape(tmp_path, capsys):
    rows = (
        f"  - {{user_name: zhang.wei, employee_number: E1001, department: 研发部, start_date: {start()}}}\n"
        f"  - {{user_name: li.na, employee_number: 7, department: 研发部, start_date: {long_ago()}}}\n"
    )
    (tmp_path / "a.yaml").write_text("employees:\n" + rows, encoding="utf-8")
    (tmp_path / "b.yml").write_text(rows.replace("  - ", "- "), encoding="utf-8")
    for name in ("a.yaml", "b.yml"):
        code, out, _ = run(capsys, tmp_path / name)
        assert (code, out.splitlines()[0]) == (0, f"{tmp_path / name}: 2 employees (yaml)")


def test_a_copy_without_suffix_is_read_in_the_format_of_its_name(tmp_path, capsys):
    """Ansible validates a temporary copy called `source`: --name gives the format and the messages' name."""
    yaml_copy = tmp_path / "source"
    yaml_copy.write_text(f"- {{user_name: zhang.wei, employee_number: E1001, department: 研发部, start_date: {start()}}}\n")
    code, out, _ = run(capsys, yaml_copy, "--name", "files/hr.yaml")
    assert (code, out.strip()) == (0, "files/hr.yaml: 1 employee (yaml)")
    code, out, _ = run(capsys, yaml_copy, "--format", "yaml")
    assert (code, out.strip()) == (0, f"{yaml_copy}: 1 employee (yaml)")
    # the same bytes read as the CSV the name says: its header lacks the columns, said with the name
    code, _, err = run(capsys, yaml_copy, "--name", "files/hr-export.csv")
    assert code == 2 and "files/hr-export.csv: the CSV header lacks user_name, employee_number" in err, err
    assert str(yaml_copy) not in err


@pytest.mark.parametrize(
    ("row", "sentence"),
    [
        ("wang.fang,E1002,王芳,,销售,,{start}", "line 3 (user_name 'wang.fang'): the record has no department"),
        ("wang.fang,E1002,王芳,销售部,销售,,next monday",
         "line 3 (user_name 'wang.fang'): start date 'next monday' is not a date (expected YYYY-MM-DD, YYYY/MM/DD or YYYY年M月D日)"),
        ("wang.fang,E1002,王芳,销售部,销售,,2026-02-30",
         "line 3 (user_name 'wang.fang'): start date '2026-02-30' is not a date (expected YYYY-MM-DD, YYYY/MM/DD or YYYY年M月D日)"),
        (",,王芳,销售部,销售,,{start}", "line 3: no user_name and no employee_number, so nobody can be looked up by this record"),
        ("zhang.wei,E1002,张伟,销售部,销售,,{start}",
         "line 3 (user_name 'zhang.wei'): user_name 'zhang.wei' is also on line 2, so a lookup would only find the first"),
        (",E1001,张伟,销售部,销售,,{start}",
         "line 3 (employee_number 'E1001'): employee_number 'E1001' is also on line 2, so a lookup would only find the first"),
        ("wang.fang,E1002,王芳,销售部,销售,,{start},广州",
         "line 3 (user_name 'wang.fang'): more fields than the header's 7 (quote a value that holds a comma)"),
    ],
)  # fmt: skip
def test_each_bad_record_is_one_sentence_with_its_line_and_exit_2(tmp_path, capsys, row, sentence):
    """`{start}` in a row: a good start date, a few days from today."""
    path = _csv(tmp_path, zhang(), row.format(start=start()), li())
    code, out, err = run(capsys, path)
    assert code == 2 and out.splitlines()[0] == "info: 1 employee past the onboarding window (start + 30 days):", out  # li.na
    assert err.strip().splitlines() == [f"error: {path} {sentence}", f"{path}: 1 problem; fix the export and check it again"]


def test_every_bad_record_is_listed_not_only_the_first(tmp_path, capsys):
    path = _csv(tmp_path, f"a,E1,A,,t,,{start()}", zhang(), "b,E2,B,部,t,,someday", li(), f"a,E3,C,部,t,,{start()}")
    code, out, _ = run(capsys, path, "--json")
    assert code == 2
    report = json.loads(out)
    assert report["ok"] is False and report["employees"] == 5
    assert [p.split(": ", 1)[0] for p in report["problems"]] == [
        f"{path} line 2 (user_name 'a')",
        f"{path} line 4 (user_name 'b')",
        f"{path} line 6 (user_name 'a')",
    ]


def test_a_header_only_export_is_refused(tmp_path, capsys):
    path = _csv(tmp_path)
    code, _, err = run(capsys, path)
    assert code == 2 and "no employee records; an empty export would make every onboarding lookup fail" in err, err


@pytest.mark.parametrize(
    ("name", "content", "sentence"),
    [
        ("hr.csv", None, "the HR export file does not exist"),
        ("hr.csv", "name,department\nzhang,研发部\n".encode(), "the CSV header lacks user_name, employee_number"),
        ("hr.csv", (HEADER + zhang() + "\n").encode("gbk"), "cannot be read as UTF-8"),
        ("hr.yaml", b"employees: [unclosed\n", "not valid YAML"),
        ("hr.yaml", b"employees: {zhang.wei: 1}\n", "expected a list of employee mappings"),
    ],
)
def test_an_unreadable_file_is_one_sentence_and_exit_2(tmp_path, capsys, name, content, sentence):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code, out, err = run(capsys, path)
    assert code == 2 and out == "", out
    assert err.startswith(f"error: {path}: ") and sentence in err and len(err.strip().splitlines()) == 1, err


def test_what_check_accepts_the_connector_finds(tmp_path, capsys):
    """The check reads with the connector's parsing: an accepted export answers a lookup for each record."""
    later = day(7)
    path = _csv(tmp_path, zhang(), f"wang.fang,E1002,王芳,销售部,销售,,{later.year}年{later.month}月{later.day}日", bom=True)
    assert run(capsys, path)[0] == 0
    hr = ExportFileConnector(path)
    assert hr.find(employee_number="E1002").department == "销售部"
    assert hr.find(user_name="zhang.wei").display_name == "张伟"
