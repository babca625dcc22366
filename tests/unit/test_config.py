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


def test_a_repeated_section_is_refused_naming_both_lines():
    text = "model:\n  served_name: a\nvllm:\n  dtype: auto\nmodel:\n  path: /srv/m\n"
    (p,) = problems(text)
    assert (p.line, p.field) == (5, "model")
    assert str(p) == "ernie.yaml:5: model: duplicate key; first at line 1; merge the two sections"


def test_repeated_keys_at_any_depth_are_all_reported():
    text = (
        "instances:\n"
        "  - port: 8000\n"  # line 2
        "    port: 8001\n"  # line 3: two ports in one instance
        "    gpu: 0\n"
        "vllm:\n"
        "  env: {A: '1', A: '2'}\n"  # line 6: flow mapping
        "  dtype: auto\n"
        "  dtype: float16\n"  # line 8
    )
    found = [str(p) for p in problems(text)]
    assert found == [
        "ernie.yaml:3: instances[0].port: duplicate key; first at line 2; keep only one of them",
        "ernie.yaml:6: vllm.env.A: duplicate key; first at line 6; keep only one of them",
        "ernie.yaml:8: vllm.dtype: duplicate key; first at line 7; keep only one of them",
    ]


def test_a_duplicate_inside_a_list_item_of_a_scenario_is_found():
    text = (
        "chat:\n"
        "  scenarios:\n"
        "    - name: a\n"
        "      system_prompt: x\n"
        "      fields:\n"
        "        - name: phone\n"  # line 6
        "          label: p\n"
        "          name: tel\n"  # line 8
    )
    (p,) = problems(text)
    assert (p.line, p.field) == (8, "chat.scenarios[0].fields[0].name") and "first at line 6" in p.message


def test_a_key_merged_in_with_yaml_merge_may_be_overridden():
    cfg = config.parse("vllm:\n  <<: {dtype: float16, max_num_seqs: 4}\n  dtype: auto\n", "ernie.yaml")
    assert (cfg.vllm.dtype, cfg.vllm.max_num_seqs) == ("auto", 4)


def test_cpu_instances_on_shared_cores_are_refused_naming_both():
    text = (
        "vllm:\n"
        "  accelerator: cpu\n"
        "instances:\n"
        "  - port: 8000\n"
        "    cpu_cores: '0-1'\n"  # line 5
        "  - port: 8001\n"
        "    cpu_cores: '1,3'\n"  # line 7
        "  - port: 8002\n"
        "    cpu_cores: '2-3'\n"  # line 9
    )
    found = problems(text)
    assert [(p.line, p.field, p.value) for p in found] == [
        (7, "instances[1].cpu_cores", "1,3"),
        (9, "instances[2].cpu_cores", "2-3"),
    ]
    first, second = found
    assert "instance 8001 shares core(s) 1 with instance 8000 (instances[0], port 8000, line 5, cpu_cores '0-1')" in first.message
    assert "never becomes ready" in first.message and "give each instance its own cores" in first.message
    assert "shares core(s) 3 with instance 8001 (instances[1], port 8001, line 7" in second.message


def test_disjoint_cores_gpu_hosts_and_the_default_split_are_accepted():
    two = "instances:\n  - port: 8000\n    cpu_cores: '{}'\n  - port: 8001\n    cpu_cores: '{}'\n"
    assert config.parse("vllm: {accelerator: cpu}\n" + two.format("0-1", "2-3"), "e.yaml")
    assert config.parse("vllm: {accelerator: gpu}\n" + two.format("0", "0"), "e.yaml")  # cores are not used on GPU
    assert config.parse("vllm: {accelerator: cpu}\n", "e.yaml")  # neither names cores: engine splits them
    (p,) = problems("vllm: {accelerator: auto}\n" + two.format("0-3", "3-4"))  # auto: checked like cpu
    assert "shares core(s) 3" in p.message and "set vllm.accelerator: gpu" in p.message


def test_named_cores_on_some_cpu_instances_only_are_refused():
    # engine.cpu_cores_for gives an unnamed instance the k-th 1/n of the host's cores whatever the others
    # name: here 8001 would get core 1 on a 2-core host (shared with 8000), 2-3 on a 4-core one.
    (p,) = problems("vllm: {accelerator: cpu}\ninstances:\n  - port: 8000\n    cpu_cores: '0-1'\n  - port: 8001\n")
    assert (p.line, p.field) == (5, "instances[1].cpu_cores")
    assert "not set for instance 8001, but instance 8000 (instances[0], port 8000, line 4) names cores '0-1'" in p.message
    assert "set cpu_cores on every instance, or on none" in p.message


def test_a_reversed_core_range_is_refused():
    (p,) = problems("instances:\n  - port: 8000\n    cpu_cores: '3-1'\n")
    assert (p.line, p.value) == (3, "3-1") and "range 3-1 is reversed" in p.message and "write 1-3" in p.message


def test_cpu_lists_parse_and_print():
    assert config.parse_cpu_list("0-3,6") == frozenset({0, 1, 2, 3, 6})
    assert config._cpu_list_text({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


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
