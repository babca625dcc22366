"""The ernie_chat role's tasks files run on this machine (tests/harness/role_tasks.py) with the variables every
chat-role test needs, and what they read back (chat.env)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tests.harness import role_tasks, tiers
from tests.harness.provision import Run

PROJECT = Path(__file__).resolve().parents[2]

# the role chowns chat.env and the export to root: as another user those tests skip (fail under CI's flag)
needs_root = tiers.unavailable("the role writes chat.env and the HR export as root") if os.geteuid() != 0 else (lambda test: test)


def playbook(
    tmp_path: Path, steps: list[str], hosts: dict[str, dict] | None = None, args: tuple[str, ...] = (),
    groups: dict[str, list[str]] | None = None, **extra: object,
) -> Run:  # fmt: skip
    """The role's `steps` on local hosts (each with its own variables), extra vars as -e (they beat role vars)."""
    variables = {
        "ernie_ops_user": "root",
        "ernie_ops_cli": f"env PYTHONPATH={PROJECT} {sys.executable} -m ernie_ops",
        "ernie_chat_env_file": str(tmp_path / "chat.env"),
        **extra,
    }
    return role_tasks.run(tmp_path, "ernie_chat", steps, hosts or {"h": {}}, args, groups, **variables)


def env_file(tmp_path: Path) -> tuple[dict[str, str], int]:
    """chat.env as {name: value} and its mode."""
    path = tmp_path / "chat.env"
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines), stat.S_IMODE(path.stat().st_mode)
