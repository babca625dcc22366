"""`ernie-ops copy batch` through the real CLI entry point: usage errors (exit 2, one sentence, no traceback,
nothing overwritten) and a gateway nobody listens on (exit 1, rows failed with the client's sentence). The
generating path against a real gateway is tests/integration/test_copy_gateway.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_ops import cli
from ernie_ops.client.gateway import FRIENDLY
from tests.conftest import free_port


@pytest.fixture()
def env(tmp_path, monkeypatch):
    cfg = tmp_path / "ernie.yaml"
    # a gateway URL with nothing listening: a usage error must be found before any request is tried
    cfg.write_text(f"gateway:\n  url: http://127.0.0.1:{free_port()}\nchat:\n  connect_timeout_seconds: 2\n")
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(cfg))
    monkeypatch.delenv("ERNIE_OPS_API_KEY", raising=False)
    (tmp_path / "in.csv").write_text("product,selling_points,audience\n保温杯,保温12小时,上班族\n水杯,轻,学生\n", encoding="utf-8")
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


def test_an_unreadable_input_is_one_sentence_exit_2(env, capsys):
    code, _, err = run(capsys, "copy", "batch", str(env / "missing.csv"), "-o", str(env / "out.csv"))
    assert code == 2 and "missing.csv cannot be read" in err and "Traceback" not in err
    assert not (env / "out.csv").exists()


def test_a_products_file_without_the_columns_is_exit_2(env, capsys):
    (env / "bad.csv").write_text("product,price\nA,1\n", encoding="utf-8")
    code, _, err = run(capsys, "copy", "batch", str(env / "bad.csv"), "-o", str(env / "out.csv"))
    assert code == 2 and "has no column" in err


def test_an_output_that_is_not_a_posts_file_is_refused_and_kept(env, capsys):
    other = env / "notes.csv"
    other.write_text("name,phone\nA,123\n", encoding="utf-8")
    code, _, err = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(other))
    assert code == 2 and "not a posts file" in err
    assert other.read_text(encoding="utf-8") == "name,phone\nA,123\n"


def test_input_and_output_the_same_file_is_refused(env, capsys):
    before = (env / "in.csv").read_bytes()
    code, _, err = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(env / "." / "in.csv"))
    assert code == 2 and "is the products file itself" in err
    assert (env / "in.csv").read_bytes() == before


def test_input_and_output_the_same_file_through_a_link(env, capsys):
    (env / "link.csv").symlink_to(env / "in.csv")
    code, _, err = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(env / "link.csv"))
    assert code == 2 and "is the products file itself" in err


@pytest.mark.parametrize(("output", "message"), [("out.txt", "must end in .csv or .xlsx"), ("nodir/out.csv", "does not exist")])
def test_a_bad_output_path_is_exit_2(env, capsys, output, message):
    code, _, err = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(env / output))
    assert code == 2 and message in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "concurrency 0 is outside 1..256"),
        (["--posts", "11"], "posts 11 is outside 1..10"),
        (["--max-chars", "x"], "max-chars 'x' is not a whole number"),
        ([], "-o/--output"),
    ],
)
def test_bad_arguments_are_usage_errors(env, capsys, args, message):
    argv = ["copy", "batch", str(env / "in.csv"), *args]
    if args:
        argv += ["-o", str(env / "out.csv")]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    _, err = capsys.readouterr()
    assert info.value.code == 2 and message in " ".join(err.split())


def test_a_config_problem_is_exit_2(env, capsys, monkeypatch):
    (env / "broken.yaml").write_text("chat:\n  marketing:\n    posts: 0\n")
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(env / "broken.yaml"))
    code, _, err = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(env / "out.csv"))
    assert code == 2 and "chat.marketing.posts" in err


def test_a_gateway_nobody_listens_on_fails_the_rows_exit_1(env, capsys):
    code, out, _ = run(capsys, "copy", "batch", str(env / "in.csv"), "-o", str(env / "out.csv"), "--json")
    summary = json.loads(out)
    assert code == 1 and summary["generated"] == 0 and len(summary["failed_rows"]) == 2
    assert {f["message"] for f in summary["failed_rows"]} == {FRIENDLY["down"]}
    assert summary["rerun_continues"] and not summary["ok"]
    assert not Path(env / "out.csv").exists()
