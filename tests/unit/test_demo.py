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
