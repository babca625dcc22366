"""The ernie_ops role's apply handler: which `ernie-ops` command a changed config leads to.

Runs the role's real handlers file in a local play with `ernie_ops_cli` pointed at a stub that records
its arguments (the real cutover runs in tests/e2e; here only the handler's decision is under test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HANDLERS = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "ernie_ops" / "handlers" / "main.yml"

PLAY = """
- hosts: localhost
  gather_facts: false
  vars:
    ernie_ops_cli: {stub}
    ernie_ops_instances: [{{port: 8000}}, {{port: 8001}}]
    ernie_ops_routed_state: {{stdout: {state}}}
    ernie_ops_routed_port: 8001
    ernie_ops_apply_changes: {mode}
  tasks:
    - name: Change something
      ansible.builtin.command: /bin/true
      changed_when: true
      notify: ernie instance changed
  handlers:
    - ansible.builtin.import_tasks: {handlers}
"""


@pytest.mark.parametrize(
    ("mode", "state", "expected"),
    [
        ("cutover", "active", ["status --json", "cutover 8000"]),  # to the spare: the port nginx does not route
        ("none", "active", []),
        ("cutover", "inactive", []),  # nothing serves yet: the first start already has the new config
    ],
)
def test_apply_handler_cuts_over_to_the_spare_port_only_when_asked_and_serving(tmp_path, mode, state, expected):
    calls = tmp_path / "calls"
    stub = tmp_path / "ernie-ops"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = status ] && echo \'{{"routed_port": 8001, "ok": true}}\'\nexit 0\n')
    stub.chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(stub=stub, state=state, mode=mode, handlers=HANDLERS))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=/usr/bin/python3", str(play)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert (calls.read_text().splitlines() if calls.exists() else []) == expected
