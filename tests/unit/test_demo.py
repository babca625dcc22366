"""`make demo`'s chat login (tests/harness/demo.py): the user goes to the playbook as the ernie_chat role's
`ernie_chat_users`, rendered by the role's own template and read back by the app's users module."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import jinja2
import pytest
import yaml

from ernie_ops import config
from ernie_ops.chat import users
from ernie_ops.errors import UsageError
from tests.harness import demo, provision, real_model, tiny_model

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "ernie_chat"


def render_users_file(tmp_path: Path, variables: dict) -> Path:
    """The role's chat-users.yaml.j2 with the variables Ansible would give it (to_json is json.dumps there too)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"), undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    text = env.get_template("chat-users.yaml.j2").render(ansible_managed="Ansible managed", **variables)
    path = tmp_path / "chat-users.yaml"
    path.write_text(text)
    return path


def test_the_demo_user_is_a_role_variable_the_app_can_log_in_with(tmp_path):
    variables = demo.chat_user_vars("demo", "s3cret-pass")
    assert set(variables) <= set(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))
    assert "s3cret-pass" not in json.dumps(variables)  # the inventory holds the hash only
    path = render_users_file(tmp_path, variables)
    assert list(users.load(str(path))) == ["demo"]
    assert users.authenticate(str(path), "demo", "s3cret-pass")
    assert not users.authenticate(str(path), "demo", "s3cret-pasS")


def test_a_password_the_app_would_refuse_is_refused_before_the_playbook():
    with pytest.raises(UsageError, match="too short"):
        demo.chat_user_vars("demo", "short")
    with pytest.raises(UsageError, match="not allowed"):
        demo.chat_user_vars("de mo", "long enough")


def test_the_state_file_is_private_and_replaces_an_older_one(tmp_path):
    path = tmp_path / "cache" / "demo.json"
    path.parent.mkdir()
    path.write_text("{}")
    path.chmod(0o644)
    demo.save_state(path, {"pid": 7, "chat_user": "demo", "chat_password": "pw-1234567"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert demo.read_state(path) == {"pid": 7, "chat_user": "demo", "chat_password": "pw-1234567"}
    demo.save_state(tmp_path / "new" / "demo.json", {})  # the cache directory is made when missing
    assert stat.S_IMODE((tmp_path / "new" / "demo.json").stat().st_mode) == 0o600


def test_login_line(tmp_path):
    assert demo.login_line({"chat_user": "demo", "chat_password": "Ab-cd_12"}) == "chat login: demo / Ab-cd_12"
    assert demo.login_line({"pid": 1}).startswith("chat login: unknown (no password in the state file")
    broken = tmp_path / "demo.json"
    broken.write_text("{not json")
    assert demo.read_state(broken) is None
    assert demo.login_line(demo.read_state(broken)).startswith("chat login: unknown")


def test_the_demo_monitoring_variables_are_the_roles_own():
    roles = Path(__file__).resolve().parents[2] / "ansible" / "roles"
    declared = set()
    for role in ("ernie_monitoring", "ernie_nginx"):
        declared |= set(yaml.safe_load((roles / role / "defaults" / "main.yml").read_text()))
    assert set(demo.monitoring_vars()) <= declared
    assert demo.HOST_IP in demo.monitoring_vars()["ernie_nginx_metrics_allow"]  # the operator's machine reads /metrics/PORT


def test_a_failed_site_yml_ends_with_the_reason_and_the_journal_command_inside_the_sandbox(tmp_path):
    """The role's failure message (ernie-ops apply's, for an instance that did not start) as Ansible prints it with
    the repository's ansible.cfg (yaml results), read back by `make demo`; the journal command made pasteable."""
    import os
    import subprocess
    import sys

    message = (
        "ernie-vllm@8000.service did not start: engine exited with code 1 while loading; its last error: ValidationError: "
        "1 validation error for ModelConfig: Value error, User-specified max_model_len (8192) is greater than 'the derived'\n"
        "Its journal: journalctl -u ernie-vllm@8000 -n 100"
    )
    play = [{"hosts": "demo", "connection": "local", "gather_facts": False, "tasks": [{"ansible.builtin.fail": {"msg": message}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    ansible_cfg = Path(__file__).resolve().parents[2] / "ansible" / "ansible.cfg"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ansible_cfg), ANSIBLE_NOCOLOR="1", ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))  # fmt: skip
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "demo,", str(tmp_path / "play.yml"),
            "-e", f"ansible_python_interpreter={sys.executable}"]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    enter = "nsenter -t 4242 -m -p -u -i -n --"
    assert demo.failure_summary(proc.stdout + proc.stderr, enter) == [
        "why:",
        f"  {message.splitlines()[0]}",
        f"  Its journal: {enter} journalctl -u ernie-vllm@8000 -n 100",
    ]
    assert demo.failure_summary("PLAY RECAP\ndemo : ok=3 changed=0 failed=0\n", enter) == []


def model_role_variables() -> set[str]:
    """Every variable the roles declare (defaults), which the demo's per-model variables must be."""
    roles = Path(__file__).resolve().parents[2] / "ansible" / "roles"
    declared: set[str] = set()
    for defaults in roles.glob("*/defaults/main.yml"):
        declared |= set(yaml.safe_load(defaults.read_text()) or {})
    return declared


def test_the_default_demo_model_is_the_real_instruct_model_in_float32():
    model = demo.choose_model(demo.DEFAULT_MODEL)
    assert demo.DEFAULT_MODEL == "smollm2"
    v = model.host_vars
    assert set(v) <= model_role_variables()
    assert v["ernie_model_expected_architecture"] == "LlamaForCausalLM"
    assert v["ernie_ops_served_name"] == model.served_name == real_model.SERVED_NAME
    assert v["ernie_model_source"] == {"type": "path", "path": model.seed_inside}
    assert "ernie-tiny" not in v["ernie_model_root"] and "ernie-tiny" not in model.seed_inside
    assert v["ernie_ops_vllm"]["dtype"] == "float32"  # bf16 changes the answers on this CPU
    assert {k: x for k, x in v["ernie_ops_vllm"].items() if k not in ("dtype", "max_model_len")} == {
        k: x for k, x in provision.host_vars()["ernie_ops_vllm"].items() if k != "max_model_len"
    }
    assert model.seed_dir is real_model.cached


def test_the_tiny_demo_model_is_what_the_e2e_tests_provision():
    model = demo.choose_model("tiny")
    assert model.host_vars == {}  # provision.host_vars() as it is
    assert model.seed_inside == provision.SEED_INSIDE
    assert model.served_name == provision.host_vars()["ernie_ops_served_name"] == tiny_model.SERVED_NAME
    assert provision.host_vars()["ernie_model_expected_architecture"] == "Ernie4_5ForCausalLM"


def test_each_demo_models_settings_make_a_config_the_app_accepts(tmp_path):
    """The model-dependent settings (max_model_len, dtype) with the chat defaults (max_tokens, margin): config.parse
    checks the prompt keeps room."""
    for name, model in demo.MODELS.items():
        vllm = {**provision.host_vars()["ernie_ops_vllm"], **model.host_vars.get("ernie_ops_vllm", {}), "accelerator": "cpu"}
        data = {"model": {"path": str(tmp_path), "served_name": model.served_name}, "vllm": vllm, "instances": [{"port": 8000}]}
        if chat := model.host_vars.get("ernie_ops_chat"):
            data["chat"] = chat  # the ernie_ops role writes ernie_ops_chat as the chat section
        cfg = config.parse(yaml.safe_dump(data), "ernie.yaml")
        assert cfg.vllm.max_model_len - cfg.chat.max_tokens - cfg.chat.margin_tokens >= 512, name
    real = config.parse(yaml.safe_dump({"chat": demo.MODELS["smollm2"].host_vars["ernie_ops_chat"]}), "ernie.yaml").chat
    assert (real.temperature, real.max_tokens) == (0.0, 320) and real.extra_body == {"repetition_penalty": 1.05}
    prompts = {s.name: s.system_prompt for s in real.effective_scenarios()}  # English only: this model follows English
    assert prompts["通用助手 General"] == "You are a helpful assistant." and len(prompts) == 5, prompts
    assert all(p.isascii() for p in prompts.values()), prompts


def test_an_unknown_model_is_refused_in_one_sentence_naming_the_choices(capsys):
    with pytest.raises(UsageError) as exc:
        demo.choose_model("ernie-4.5")
    assert str(exc.value) == "MODEL='ernie-4.5' is not a demo model; use one of: smollm2, tiny (default smollm2)"
    assert demo.main(["up", "--model", "ernie-4.5"]) == 2
    assert capsys.readouterr().out.strip() == str(exc.value)


def test_the_printout_names_the_model_and_how_to_serve_ernie_weights_instead(tmp_path):
    state = {"chat_user": "demo", "chat_password": "Ab-cd_12"}
    text = demo.served_text(demo.MODELS["smollm2"], state, 212.4, tmp_path, "nsenter -t 42 --")
    title = "SmolLM2-135M-Instruct (Apache-2.0, English-first; a stand-in: ERNIE weights cannot be downloaded here)"
    assert f'serves {title} as model "smollm2-135m"' in text
    assert '"model":"smollm2-135m"' in text and "ernie-tiny" not in text
    assert "site.yml took 212 s" in text and "chat login: demo / Ab-cd_12" in text
    swap = "\n".join(demo.ernie_swap_lines(tmp_path))
    assert swap in text
    assert f"-i {tmp_path / 'hosts.yml'} upgrade.yml -e @" in swap
    assert f"-i {tmp_path / 'hosts.yml'} site.yml -e @" in swap  # upgrade.yml leaves the chat app on the old name
    # the variables the swap sets are the roles' own, the source a kind the ernie_model role accepts
    model_spec = yaml.safe_load((ROLE.parent / "ernie_model" / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    file_lines = [line for line in swap.splitlines()[1:] if line.startswith("  ") and ": " in line and "ansible" not in line]
    ernie_yml = yaml.safe_load("\n".join(file_lines))
    assert set(ernie_yml) <= model_role_variables()
    assert ernie_yml["ernie_model_expected_architecture"] == "Ernie4_5ForCausalLM"
    source_spec = model_spec["options"]["ernie_model_source"]["options"]
    assert ernie_yml["ernie_model_source"]["type"] in source_spec["type"]["choices"]
    assert set(ernie_yml["ernie_model_source"]) <= set(source_spec)
    tiny = demo.served_text(demo.MODELS["tiny"], state, 1, tmp_path, "nsenter -t 42 --")
    assert 'as model "ernie-tiny"' in tiny and '"model":"ernie-tiny"' in tiny


def test_a_second_make_demo_prints_the_login_again_and_succeeds(tmp_path, monkeypatch, capsys):
    """The README: "a second `make demo` prints it again". Nothing is booted (the state file says a host is up), and
    make must not report it as an error."""
    state = tmp_path / "demo.json"
    demo.save_state(state, {"base": "/nonexistent", "pid": 1, "chat_user": "demo", "chat_password": "s3cret-pass"})
    monkeypatch.setattr(demo, "STATE", state)
    assert demo.up("tiny") == 0
    out = capsys.readouterr().out
    assert "a demo host is already up" in out and "chat login: demo / s3cret-pass" in out and "`make demo-down` removes it" in out
