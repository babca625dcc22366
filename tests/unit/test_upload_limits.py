"""The chat's upload limit, one setting (chat.docs.max_file_mb) read at every layer a file crosses: Chainlit's
config, the gateway's and the edge's `location = /project/file`, and the files shipped and rendered for them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from ernie_ops import cli, config
from ernie_ops.chat import upload_limits
from ernie_ops.chat.config import ChatConfig
from ernie_ops.chat_app import server

ROOT = Path(__file__).resolve().parents[2]
LIMIT = re.compile(r"client_max_body_size (\d+)m;")


def chat(max_file_mb: float) -> ChatConfig:
    return config.parse(f"chat:\n  docs:\n    max_file_mb: {max_file_mb}\n").chat


@pytest.mark.parametrize(("app_mb", "chainlit_mb"), [(0.5, 100), (20, 100), (30, 120), (300, 1024), (1024, 1024)])
def test_each_layer_takes_more_than_the_app_so_the_app_names_its_limit(app_mb, chainlit_mb):
    c = chat(app_mb)
    assert upload_limits.chainlit_mb(c) == chainlit_mb
    assert upload_limits.nginx_mb(c) == chainlit_mb + 1 > app_mb  # nginx takes Chainlit's limit and the multipart envelope
    assert upload_limits.ask_mb(c) == min(100, max(1, int(app_mb)))


def test_chainlit_s_config_and_the_cli_say_the_same_numbers(tmp_path, capsys):
    cfg_file = tmp_path / "ernie.yaml"
    cfg_file.write_text("chat:\n  docs:\n    max_file_mb: 30\n")
    server.prepare(config.load(str(cfg_file)), tmp_path / "state")
    toml = tomllib.loads((tmp_path / "state" / ".chainlit" / "config.toml").read_text())
    assert toml["features"]["spontaneous_file_upload"]["max_size_mb"] == 120
    assert cli.main(["--config", str(cfg_file), "gateway", "limits"]) == 0
    assert json.loads(capsys.readouterr().out) == {"chat_upload_mb": 121, "chat_app_upload_mb": 30.0, "edge_weight": 1}


def test_a_config_with_a_bad_limit_is_a_sentence_not_a_traceback(tmp_path, capsys):
    cfg_file = tmp_path / "ernie.yaml"
    cfg_file.write_text("chat:\n  docs:\n    max_file_mb: lots\n")
    assert cli.main(["--config", str(cfg_file), "gateway", "limits"]) == 2
    err = capsys.readouterr().err
    assert "chat.docs.max_file_mb" in err and "Traceback" not in err


def test_the_gateway_and_the_edge_give_chainlit_s_upload_path_its_own_limit_and_the_api_keeps_2m():
    locations = (ROOT / "nginx" / "ernie-ops" / "locations.conf").read_text()
    chat_location = locations[locations.index("location / {") :]
    assert "location = /project/file {\n        include ernie-ops/chat-upload.conf;\n        proxy_pass http://ernie_chat;" in chat_location
    assert re.findall(r"client_max_body_size (\S+);", locations) == ["2m"]  # the server-wide one: /v1/ and the rest
    edge = (ROOT / "nginx" / "ernie-edge.conf").read_text()
    assert (
        "location = /project/file {\n            include ernie-edge/chat-upload.conf;\n            proxy_pass http://$ernie_edge_pool;"
        in edge
    )


def test_the_shipped_includes_and_the_check_mode_fallback_are_a_default_config_s_limit():
    default = upload_limits.nginx_mb(config.parse("{}").chat)
    for shipped in (ROOT / "nginx" / "ernie-ops" / "chat-upload.conf", ROOT / "nginx" / "ernie-edge" / "chat-upload.conf"):
        assert LIMIT.findall(shipped.read_text()) == [str(default)], shipped
    role_vars = yaml.safe_load((ROOT / "ansible" / "roles" / "ernie_nginx" / "vars" / "main.yml").read_text())
    assert role_vars["ernie_nginx_chat_upload_mb_unknown"] == default
    for role, var in (("ernie_nginx", "ernie_nginx_chat_upload_mb"), ("ernie_edge", "ernie_edge_chat_upload_mb")):
        template = (ROOT / "ansible" / "roles" / role / "templates" / "chat-upload.conf.j2").read_text()
        assert f"client_max_body_size {{{{ {var} }}}}m;" in template


def test_the_edge_asks_the_gateways_ernie_ops_where_the_ernie_ops_role_puts_it():
    edge_vars = yaml.safe_load((ROOT / "ansible" / "roles" / "ernie_edge" / "vars" / "main.yml").read_text())
    ops_vars = yaml.safe_load((ROOT / "ansible" / "roles" / "ernie_ops" / "vars" / "main.yml").read_text())
    assert edge_vars["ernie_edge_gateway_cli"] == ops_vars["ernie_ops_cli"]
    assert edge_vars["ernie_edge_gateway_config"] == ops_vars["ernie_ops_config_file"]
    ceiling = upload_limits.CHAINLIT_CEILING_MB + upload_limits.ENVELOPE_MB
    assert edge_vars["ernie_edge_chat_upload_unknown_mb"] == ceiling


EDGE = ROOT / "ansible" / "roles" / "ernie_edge"


def edge_play(tmp_path: Path, task: dict, extra: dict, inventory: dict | None = None) -> subprocess.CompletedProcess:
    """`task` in a play with the edge role's vars/main.yml, run by ansible-playbook on localhost with `extra` as -e
    (the results the role's tasks register, given as they would be) and `inventory` (default: localhost alone)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump(inventory or {"all": {"hosts": {"localhost": local}}}))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars_files": [str(EDGE / "vars" / "main.yml")],
                                     "tasks": [task]}]))  # fmt: skip
    given = tmp_path / "extra.json"
    given.write_text(json.dumps({"role_path": str(EDGE), **extra}))
    bin_dir = Path(sys.executable).parent
    out = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(hosts), str(play), "-e", f"@{given}"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        (
            [{"rc": 0, "stdout": '{"chat_upload_mb": 121, "chat_app_upload_mb": 30.0}'}, {"rc": 0, "stdout": '{"chat_upload_mb": 101}'}],
            "121",
        ),
        ([{"rc": 0, "stdout": '{"chat_upload_mb": 101}'}, {"unreachable": True, "msg": "no route"}], "1025"),
        ([{"rc": 2, "stdout": "", "stderr": "error: 1 problem(s) in the config"}], "1025"),
        ([], "1025"),
    ],
)
def test_the_edge_takes_the_largest_gateway_limit_and_chainlit_s_ceiling_for_one_that_did_not_answer(tmp_path, results, expected):
    """The role's own expression (vars/main.yml) evaluated by ansible-playbook on the results its task registers."""
    show = {"ansible.builtin.debug": {"msg": "MB={{ ernie_edge_chat_upload_mb }}"}}
    out = edge_play(tmp_path, show, {"ernie_edge_chat_upload_limits": {"results": results}})
    assert re.search(r'"msg": "MB=(\d+)"', out.stdout).group(1) == expected, out.stdout[-1500:]


def test_the_edge_weighs_each_gateway_by_the_replicas_its_own_ernie_ops_says(tmp_path):
    """The role's ernie_edge_weights and upstream template, run by ansible-playbook on the answers its task registers
    (issue 33): a 4-replica host weighs 4, a 1-replica one is written as before (no weight), one that did not answer
    and an address given by hand weigh 1; the edge's keyed group hashes X-Session-Id over the same servers."""
    inventory = {"all": {"children": {"ernie_inference": {"hosts": {
        "gpu4": {"ansible_host": "10.0.0.4"}, "cpu1": {"ansible_host": "10.0.0.5"}, "gone": {"ansible_host": "10.0.0.6"}}}},
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}  # fmt: skip
    results = [
        {"item": "gpu4", "rc": 0, "stdout": '{"chat_upload_mb": 121, "edge_weight": 4}'},
        {"item": "cpu1", "rc": 0, "stdout": '{"chat_upload_mb": 121, "edge_weight": 1}'},
        {"item": "gone", "unreachable": True, "msg": "no route"},
    ]
    out_file = tmp_path / "upstream.conf"
    write = {"ansible.builtin.template": {"src": str(EDGE / "templates" / "upstream.conf.j2"), "dest": str(out_file), "mode": "0644"}}
    backends = ["10.0.0.4:8081", "10.0.0.5:8081", "10.0.0.6:8081", "192.0.2.9:8081"]
    edge_play(tmp_path, write, {"ernie_edge_chat_upload_limits": {"results": results}, "ernie_edge_backends": backends}, inventory)
    servers = [line for line in out_file.read_text().splitlines() if line.startswith("server ")]
    assert servers == [
        "server 10.0.0.4:8081 weight=4 max_fails=1 fail_timeout=10s;",
        "server 10.0.0.5:8081 max_fails=1 fail_timeout=10s;",
        "server 10.0.0.6:8081 max_fails=1 fail_timeout=10s;",
        "server 192.0.2.9:8081 max_fails=1 fail_timeout=10s;",
    ], servers
    site = (ROOT / "nginx" / "ernie-edge.conf").read_text()
    keyed = site.split("upstream ernie_gateways_keyed {", 1)[1].split("}", 1)[0]
    assert "hash $ernie_session_key consistent;" in keyed and "include ernie-edge/upstream.conf;" in keyed
    api = site.split("location /v1/ {", 1)[1].split("}", 1)[0]
    assert "js_content ernie_session.route;" in api  # X-Session-Id, else the body's `user`: @keyed or @balanced
    assert "proxy_pass http://ernie_gateways_keyed;" in site.split("location @keyed {", 1)[1].split("}", 1)[0]
