"""Each role runs alone with its tag (`site.yml --tags chat`): no role reads a variable another role registers.

`--tags chat` once aborted on a variable only another role's task registered (skipped by the tag). The e2e fleet ran
every role's tag for real to catch that (six playbook runs, ~260 s of its lane); the class of bug is a static fact of
the role files, so it is checked here: a name a role registers (or sets with set_fact) carries the role's prefix, and a
role reads another role's names only when that role's tasks run whenever its own do (tagged `always` in the play, as
ernie_preflight, or imported by it, as ernie_venv by ernie_vllm and ernie_chat). The roles' no-change on a provisioned,
upgraded fleet is the e2e `--check` run; their tags for real are the runs the fleet's tests make (chat, edge, ernie_ops).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"


def _tasks(obj):
    """Every mapping in a tasks file, blocks and their rescue/always included."""
    if isinstance(obj, dict):
        yield obj
        for value in obj.values():
            yield from _tasks(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _tasks(value)


def _files(role: Path, *dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (role / d).rglob("*") if p.is_file())


def registered(role: Path) -> set[str]:
    """The names a role's tasks and handlers register or set with set_fact."""
    names = set()
    for path in _files(role, "tasks", "handlers"):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            if isinstance(task.get("register"), str):
                names.add(task["register"])
            facts = task.get("ansible.builtin.set_fact", task.get("set_fact"))
            if isinstance(facts, dict):
                names |= {k for k in facts if k != "cacheable"}
    return names


def imported(role: Path) -> set[str]:
    """Roles whose tasks this role imports (they run under its tags)."""
    out = set()
    for path in _files(role, "tasks"):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            for key in ("ansible.builtin.import_role", "import_role", "ansible.builtin.include_role", "include_role"):
                if isinstance(task.get(key), dict):
                    out.add(task[key]["name"])
    return out


def always_roles(playbook: Path) -> set[str]:
    """Roles tagged `always` in a play: their tasks run whatever --tags says."""
    out = set()
    for play in yaml.safe_load(playbook.read_text()) or []:
        for entry in play.get("roles", []):
            if isinstance(entry, dict) and "always" in entry.get("tags", []):
                out.add(entry["role"])
    return out


def problems(ansible: Path, playbook: str = "site.yml") -> list[str]:
    """Sentences naming each file that breaks a role's run alone, and the name it reads or registers."""
    roles = {r.name: r for r in sorted((ansible / "roles").iterdir()) if (r / "tasks").is_dir()}
    names = {name: registered(role) for name, role in roles.items()}
    always = always_roles(ansible / playbook)
    found = [
        f"{name}: registers {n!r} without the role's prefix '{name}_'"
        for name in roles
        for n in sorted(names[name])
        if not n.startswith(name + "_")
    ]
    for name, role in roles.items():
        readable = always | imported(role) | {name}
        for path in _files(role, "tasks", "handlers", "templates", "defaults", "vars"):
            text = path.read_text(errors="replace")
            for other in sorted(set(roles) - readable):
                for n in sorted(names[other]):
                    if re.search(rf"\b{re.escape(n)}\b", text):
                        found.append(f"{path.relative_to(ansible)} reads {n!r}, registered by {other}: `--tags` of {name} alone skips it")
    return found


def test_no_role_reads_what_another_role_registers():
    assert not problems(ANSIBLE), "\n".join(problems(ANSIBLE))


def test_a_role_reading_another_roles_register_is_named(tmp_path):
    """The check against the regression's shape: chat reads what nginx registers; and an unprefixed register."""

    def role(name: str, tasks: list) -> None:
        (tmp_path / "roles" / name / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / name / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks))

    role("pre", [{"name": "facts", "ansible.builtin.set_fact": {"pre_accel": "cpu"}}])
    role("venv", [{"name": "pip", "ansible.builtin.command": "true", "register": "venv_pinned"}])
    role("nginx", [{"name": "limit", "ansible.builtin.command": "true", "register": "nginx_upload_mb"},
                   {"name": "x", "block": [{"name": "y", "ansible.builtin.command": "true", "register": "result"}]}])  # fmt: skip
    role("chat", [
        {"name": "venv", "ansible.builtin.import_role": {"name": "venv"}},
        {"name": "uses", "ansible.builtin.debug": {"msg": "{{ pre_accel }} {{ venv_pinned is changed }} {{ nginx_upload_mb.stdout }}"}},
    ])  # fmt: skip
    (tmp_path / "site.yml").write_text(yaml.safe_dump([{"hosts": "all", "roles": [{"role": "pre", "tags": ["always"]}, "nginx", "chat"]}]))
    assert problems(tmp_path) == [
        "nginx: registers 'result' without the role's prefix 'nginx_'",
        "roles/chat/tasks/main.yml reads 'nginx_upload_mb', registered by nginx: `--tags` of chat alone skips it",
    ]
