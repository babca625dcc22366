"""`ernie-ops eval` when it cannot judge: a bad set (exit 2, every problem, no traceback), a model that is not
listening (exit 1, one sentence), a bad --min-pass-rate. Passing and failing runs are in
tests/integration/test_eval_real_model.py (the real and the random model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ernie_ops import cli
from ernie_ops.errors import EXIT_FAILED, EXIT_USAGE
from tests.conftest import free_port

SMOKE = Path(cli.__file__).parents[1] / "data" / "eval" / "smoke.yaml"


@pytest.fixture()
def env(tmp_path, monkeypatch):
    cfg = tmp_path / "ernie.yaml"
    cfg.write_text(f"chat:\n  docs:\n    index_file: {tmp_path / 'state' / 'index.sqlite'}\n")
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(cfg))
    return tmp_path


def test_a_bad_set_lists_every_problem_and_exits_2(env, capsys):
    bad = env / "bad.yaml"
    bad.write_text("cases:\n  - id: a\n    messages: [{role: user, content: hi}]\n"
                   "  - id: b\n    onboard: {login: x}\n    must_include: [y]\n")  # fmt: skip
    assert cli.main(["eval", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: 2 problem(s) in the golden set:" in err
    assert f"{bad}:2: cases[0]: give `must_include` and/or `must_not_include`" in " ".join(err.split())
    assert f"{bad}:5: cases[1].onboard = {{'login': 'x'}}: unknown key" in " ".join(err.split())
    assert "Traceback" not in err


def test_a_model_that_is_not_listening_is_one_sentence_and_exit_1(env, capsys):
    port = free_port()  # nothing listens there
    assert cli.main(["eval", str(SMOKE), "--port", str(port)]) == EXIT_FAILED
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"error: cannot reach http://127.0.0.1:{port}: ConnectError"), err
    assert err.endswith("start the instance or check --port / gateway.url")
    assert "Traceback" not in err


@pytest.mark.parametrize("rate", ["1.5", "-0.1", "most"])
def test_min_pass_rate_is_a_share(env, capsys, rate):
    with pytest.raises(SystemExit) as exc:
        cli.main(["eval", str(SMOKE), "--min-pass-rate", rate])
    assert exc.value.code == EXIT_USAGE
    assert "is not a share between 0 and 1" in capsys.readouterr().err
