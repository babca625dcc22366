"""`make demo`'s chat login (tests/harness/demo.py): the user goes to the playbook as the ernie_chat role's
`ernie_chat_users`, rendered by the role's own template and read back by the app's users module."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import jinja2
import pytest
import yaml

from ernie_ops.chat import users
from ernie_ops.errors import UsageError
from tests.harness import demo

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
