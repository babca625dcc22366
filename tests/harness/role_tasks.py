"""One role's tasks files run for real by ansible-playbook on this machine (connection local, one inventory host
per case, each with its own variables): the same files site.yml runs (`include_role: tasks_from`), for checks
whose every failure path must be shown without a sandboxed host (preflight sentences, files under tmp_path)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.harness.provision import Run

PROJECT = Path(__file__).resolve().parents[2]
ROLES = PROJECT / "ansible" / "roles"
BIN = Path(sys.executable).parent


def run(
    tmp_path: Path, role: str, steps: list[str], hosts: dict[str, dict], args: tuple[str, ...] = (),
    groups: dict[str, list[str]] | None = None, before: list[dict] | None = None, after: list[dict] | None = None,
    **variables: object,
) -> Run:  # fmt: skip
    """The role's tasks files `steps` on local `hosts` (members of `groups`, e.g. {"ernie_inference": [...]});
    `variables` as -e (they beat every other variable). `before`/`after`: tasks of the play around them (`after` sees
    the role's variables: the include is public then), e.g. another role's step whose facts this one reads."""
    work = tmp_path / "ansible"
    work.mkdir(exist_ok=True)
    inventory: dict = {"all": {"hosts": {name: {"ansible_python_interpreter": sys.executable, **v} for name, v in hosts.items()}}}
    if groups:
        inventory["all"]["children"] = {g: {"hosts": {h: {} for h in members}} for g, members in groups.items()}
    (work / "hosts.yml").write_text(yaml.safe_dump(inventory, allow_unicode=True))
    step = {"ansible.builtin.include_role": {"name": role, "tasks_from": "{{ item }}", **({"public": True} if after else {})},
            "loop": "{{ steps }}"}  # fmt: skip
    tasks = [*(before or []), step, *(after or [])]
    (work / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "connection": "local", "gather_facts": False, "tasks": tasks}]))
    (work / "vars.json").write_text(json.dumps({"steps": steps, **variables}, ensure_ascii=False))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOME=str(work / "home"),
               ANSIBLE_LOCAL_TEMP=str(work / "tmp"), ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # fmt: skip
    env.pop("ANSIBLE_CONFIG", None)
    argv = [str(BIN / "ansible-playbook"), "-i", str(work / "hosts.yml"), str(work / "play.yml"), "-e", f"@{work / 'vars.json'}", *args]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    return Run(proc.returncode, proc.stdout + proc.stderr, 0.0)


def failures(result: Run) -> dict[str, str]:
    """{host: msg} of the failed tasks (a failed loop item is reported as `failed: [host] (item=...) => {...}`)."""
    pattern = r"^(?:fatal: \[(\S+)\]: FAILED!|failed: \[(\S+)\] \(item=.*?\)) => (\{.*\})$"
    return {m[1] or m[2]: json.loads(m[3]).get("msg", "") for m in re.finditer(pattern, result.output, re.M)}
