"""Config schema: defaults, every error at once with file/line/field/value, CLI exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_ops import cli, config
from ernie_ops.errors import ConfigError, UsageError


def problems(text: str) -> list:
    with pytest.raises(ConfigError) as info:
        config.parse(text, "ernie.yaml")
    return info.value.problems


def test_empty_file_gives_documented_defaults():
    cfg = config.parse("", "ernie.yaml")
    assert cfg.vllm.enforce_eager is False  # CUDA graphs on for the dense model on GPU
    assert cfg.model.served_name == "ernie-4.5-0.3b-pt"
    assert [i.port for i in cfg.instances] == [8000, 8001]
    assert cfg.vllm.gpu_memory_utilization < 0.5  # two instances must fit one GPU during a cutover


def test_every_problem_is_reported_with_line_field_value_and_allowed():
    text = (
        "vllm:\n"
        "  max_model_lenn: 5\n"  # line 2: typo
        "  dtype: bf16\n"  # line 3: not allowed
        "instances:\n"
        "  - port: 80\n"  # line 5: range
        '  - port: "8001"\n'  # line 6: wrong type
        "foo: 1\n"  # line 7: unknown section
    )
    found = {p.field: p for p in problems(text)}
    assert set(found) == {"vllm.max_model_lenn", "vllm.dtype", "instances[0].port", "instances[1].port", "foo"}
    typo = found["vllm.max_model_lenn"]
    assert typo.line == 2 and typo.value == 5 and "did you mean 'max_model_len'" in typo.message
    assert "allowed here:" in typo.message and "max_num_seqs" in typo.message
    assert found["vllm.dtype"].line == 3 and "'bfloat16'" in found["vllm.dtype"].message
    assert found["instances[0].port"].line == 5 and "1024" in found["instances[0].port"].message
    assert found["instances[1].port"].value == "8001"
    assert found["foo"].line == 7 and "model, vllm, instances" in found["foo"].message
    assert [p.line for p in problems(text)] == sorted(p.line for p in problems(text))


def test_duplicate_ports_and_owned_flags_are_rejected():
    found = problems("instances:\n  - port: 8000\n  - port: 8000\nvllm:\n  extra_args: ['--port', '9000']\n")
    messages = " | ".join(str(p) for p in found)
    assert "port 8000 is listed more than once" in messages
    assert "--port is set by ernie-ops" in messages


def test_yaml_syntax_error_names_the_line():
    (p,) = problems("vllm:\n  dtype: [auto\n")
    assert p.field == "(yaml)" and p.line is not None and "not valid YAML" in p.message


def test_top_level_must_be_a_mapping():
    (p,) = problems("- a\n- b\n")
    assert "must be a mapping" in p.message


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError) as info:
        config.load(str(tmp_path / "nope.yaml"))
    assert "not found" in str(info.value) and config.ENV_VAR in str(info.value)


def test_env_var_selects_the_file(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("model:\n  served_name: other\n")
    monkeypatch.setenv(config.ENV_VAR, str(f))
    assert config.load().model.served_name == "other"


def test_unknown_port_is_a_usage_error():
    cfg = config.parse("instances:\n  - port: 8000\n")
    with pytest.raises(UsageError, match=r"port 9000 is not an instance in the config \(instances: 8000\)"):
        cfg.instance(9000)


def test_cli_config_check_exit_codes_and_json(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("vllm:\n  max_model_len: 4096\n")
    assert cli.main(["--config", str(good), "config", "check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["config"]["vllm"]["max_model_len"] == 4096

    bad = tmp_path / "bad.yaml"
    bad.write_text("vllm:\n  gpu_memory_utilization: 1.5\n")
    assert cli.main(["--config", str(bad), "config", "check", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and out["problems"][0]["field"] == "vllm.gpu_memory_utilization"
    assert out["problems"][0]["line"] == 2 and out["problems"][0]["value"] == 1.5

    assert cli.main(["--config", str(bad), "config", "check"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:2: vllm.gpu_memory_utilization = 1.5" in err and "Traceback" not in err


def test_cli_rejects_bad_port_argument(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "80"])
    assert info.value.code == 2
    assert "outside 1024-65535" in capsys.readouterr().err


def test_serve_unknown_port_is_exit_2_without_traceback(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("instances:\n  - port: 8000\n")
    assert cli.main(["--config", str(f), "serve", "8005"]) == 2
    err = capsys.readouterr().err
    assert "port 8005 is not an instance" in err and "Traceback" not in err


def test_example_config_in_repo_is_valid():
    example = Path(__file__).resolve().parents[2] / "ernie_ops" / "data" / "ernie.example.yaml"
    cfg = config.load(str(example))
    assert cfg.model.served_name
