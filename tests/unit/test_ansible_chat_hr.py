"""The ernie_chat role's HR inputs, run for real by ansible-playbook on this machine
(connection local, files under tmp_path): the token's preflight sentences, chat.env's token line, the HR
export installed only after `ernie-ops hr check` accepts it. Each step is the role's own tasks file
(`include_role: tasks_from`), the one site.yml runs; the whole role on a systemd host is tests/e2e/test_ansible.py's.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import yaml

from tests.harness import role_tasks
from tests.harness.chat_role import env_file as _env
from tests.harness.chat_role import needs_root, playbook
from tests.harness.dates import days_from_today

PROJECT = Path(__file__).resolve().parents[2]
ROLES = PROJECT / "ansible" / "roles"
HEADER = "user_name,employee_number,display_name,department,title,manager,start_date\n"
GOOD = (  # start dates relative to today: one still to come, one long ago
    HEADER + f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{days_from_today(5)}\nli.na,E0007,李娜,研发部,经理,,{days_from_today(-2000)}\n"
)
failures = role_tasks.failures


TOKENS = {  # host: (token, what the sentence says it contains); the tokens carry a marker that must never be printed
    "newline": ("SeCrEt-1-abc\n", "a line break"),
    "cr": ("SeCrEt-2-abc\rdef", "a line break"),
    "space": ("SeCrEt-3 abc", "a space, a quote, a backslash, a control or a non-ASCII character"),
    "quote": ('"SeCrEt-4-abc"', "a space, a quote, a backslash, a control or a non-ASCII character"),
    "apostrophe": ("SeCrEt-5-a'bc", "a space, a quote, a backslash, a control or a non-ASCII character"),
    "backslash": ("SeCrEt-6-a\\bc", "a space, a quote, a backslash, a control or a non-ASCII character"),
    "tab": ("SeCrEt-7-a\tbc", "a space, a quote, a backslash, a control or a non-ASCII character"),
    "cjk": ("SeCrEt-8-令牌", "a space, a quote, a backslash, a control or a non-ASCII character"),
}


def test_preflight_refuses_an_hr_token_an_environment_file_cannot_hold_and_a_missing_or_mismatched_export(tmp_path):
    """One host per mistake in one run: each fails with its own sentence, the others pass; no token is ever printed."""
    (tmp_path / "hr.csv").write_text(GOOD, encoding="utf-8")
    hosts = {name: {"ernie_chat_hr_token": token} for name, (token, _) in TOKENS.items()}
    hosts["jwt"] = {"ernie_chat_hr_token": "SeCrEt-9.eyJhbGciOi_-~+/=:$%!"}  # what bearer tokens look like: accepted
    hosts["none"] = {"ernie_chat_hr_token": ""}
    hosts["absent"] = {"ernie_chat_hr_export_src": str(tmp_path / "nope.csv")}
    hosts["directory"] = {"ernie_chat_hr_export_src": str(tmp_path)}
    hosts["other_format"] = {"ernie_chat_hr_export_src": str(tmp_path / "hr.csv"),
                             "ernie_ops_chat": {"onboarding": {"hr": {"file": "/etc/ernie-ops/people.yaml"}}}}  # fmt: skip
    hosts["bad_env_name"] = {"ernie_ops_chat": {"onboarding": {"hr": {"token_env": "hr-token"}}}}
    hosts["export"] = {"ernie_chat_hr_export_src": str(tmp_path / "hr.csv")}
    run = playbook(tmp_path, ["preflight"], hosts, ("-vv",))
    failed = failures(run)
    assert sorted(failed) == sorted([*TOKENS, "absent", "directory", "other_format", "bad_env_name"]), run.output[-4000:]
    for name, (_, says) in TOKENS.items():
        assert failed[name] == (
            f"ernie_chat_hr_token contains {says}, which breaks its line ERNIE_OPS_HR_TOKEN=... in {tmp_path / 'chat.env'}: give the token "
            "exactly as the HR system issued it, on one line without a trailing newline (a YAML `|` block or a vaulted string typed "
            "with Enter adds one)."
        ), name
    assert "SeCrEt" not in run.output  # no_log: the token is in no result, not even at -vv
    not_a_file = "is not a file on the controller: give the path of the HR export (CSV or YAML)."
    assert {k: failed[k] for k in ("absent", "directory", "other_format", "bad_env_name")} == {
        "absent": f"ernie_chat_hr_export_src {tmp_path / 'nope.csv'} {not_a_file}",
        "directory": f"ernie_chat_hr_export_src {tmp_path} {not_a_file}",
        "other_format": f"ernie_chat_hr_export_src {tmp_path / 'hr.csv'} is CSV but the app reads /etc/ernie-ops/people.yaml "
        "(chat.onboarding.hr.file) as YAML by its suffix: give a YAML export, or set chat.onboarding.hr.file to a name with the "
        "suffix of the export.",
        "bad_env_name": "ernie_ops_chat.onboarding.hr.token_env 'hr-token' is not an environment variable name: use capitals, digits "
        "and '_' (default ERNIE_OPS_HR_TOKEN).",
    }
    assert all(run.recap()[h]["failed"] == 0 for h in ("jwt", "none", "export")), run.recap()


@needs_root
def test_chat_env_holds_the_token_line_named_by_token_env_beside_the_kept_secret(tmp_path):
    hr = {"ernie_ops_chat": {"onboarding": {"hr": {"source": "scim", "url": "https://hr.example.com/scim/v2", "token_env": "HR_BEARER"}}}}
    run = playbook(tmp_path, ["preflight", "env"], ernie_chat_hr_token="", **hr)  # a new host, no token: no line
    assert run.rc == 0 and sorted(_env(tmp_path)[0]) == ["CHAINLIT_AUTH_SECRET"], run.output[-4000:]
    secret = _env(tmp_path)[0]["CHAINLIT_AUTH_SECRET"]
    run = playbook(tmp_path, ["preflight", "env"], ernie_chat_hr_token="tok.A-1", **hr)
    assert run.rc == 0 and run.recap()["h"]["changed"] == 1, run.output[-4000:]
    assert _env(tmp_path) == ({"CHAINLIT_AUTH_SECRET": secret, "HR_BEARER": "tok.A-1"}, 0o600)
    again = playbook(tmp_path, ["preflight", "env"], ernie_chat_hr_token="tok.A-1", **hr)
    assert again.rc == 0 and again.recap()["h"]["changed"] == 0, again.changed_tasks()
    check = playbook(tmp_path, ["preflight", "env"], args=("--check",), ernie_chat_hr_token="tok.B-2", **hr)
    assert check.rc == 0 and check.recap()["h"]["changed"] == 1, check.output[-4000:]
    assert _env(tmp_path)[0]["HR_BEARER"] == "tok.A-1"  # --check wrote nothing
    # empty: the line chat.env has is left as it is, here one an operator edited by hand
    path = tmp_path / "chat.env"
    path.write_text(path.read_text().replace("HR_BEARER=tok.A-1", "HR_BEARER=by.hand-7") + "ERNIE_OPS_API_KEY=key-by-hand\n")
    kept = playbook(tmp_path, ["preflight", "env"], ernie_chat_hr_token="", **hr)
    assert kept.rc == 0 and kept.recap()["h"]["changed"] == 0, kept.changed_tasks()
    env = {"CHAINLIT_AUTH_SECRET": secret, "HR_BEARER": "by.hand-7", "ERNIE_OPS_API_KEY": "key-by-hand"}
    assert _env(tmp_path) == (env, 0o600)  # the gateway key an operator added by hand survives too


@needs_root
def test_a_bad_export_never_replaces_the_installed_one(tmp_path):
    src, dest = tmp_path / "hr-export.csv", tmp_path / "etc" / "hr-export.csv"
    dest.parent.mkdir()
    hr = {"ernie_ops_chat": {"onboarding": {"hr": {"file": str(dest)}}}, "ernie_chat_hr_export_src": str(src)}
    src.write_text(GOOD, encoding="utf-8")
    run = playbook(tmp_path, ["preflight", "hr_export"], **hr)
    assert run.rc == 0 and run.recap()["h"]["changed"] == 1, run.output[-4000:]
    assert dest.read_text(encoding="utf-8") == GOOD and stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert playbook(tmp_path, ["preflight", "hr_export"], **hr).recap()["h"]["changed"] == 0
    src.write_text(GOOD + f"wang.fang,E1002,王芳,,销售,,{days_from_today(7)}\n", encoding="utf-8")
    check = playbook(tmp_path, ["preflight", "hr_export"], args=("--check",), **hr)  # --check copies nothing, checks nothing
    assert check.rc == 0 and check.recap()["h"]["changed"] == 1 and dest.read_text(encoding="utf-8") == GOOD
    bad = playbook(tmp_path, ["preflight", "hr_export"], **hr)
    assert bad.rc != 0 and failures(bad) == {"h": "failed to validate"}, bad.output[-4000:]
    assert f"error: {src} line 4 (user_name 'wang.fang'): the record has no department" in bad.output
    assert "王芳" not in bad.output.replace("wang.fang", "")  # no diff of the people's data, only the sentence
    assert dest.read_text(encoding="utf-8") == GOOD  # the working export stays


def _tasks(items: list) -> list[dict]:
    """Every task of a tasks file, those inside blocks included."""
    out = []
    for task in items or []:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out.extend(_tasks(task.get(key, [])))
    return out


def test_every_task_that_handles_the_hr_token_has_no_log():
    """Static: a task whose expressions read ernie_chat_hr_token, or that renders chat.env.j2 (which does), is no_log."""
    token = re.compile(r"\bernie_chat_hr_token(?!\w)")
    handling = {}
    for path in sorted((ROLES / "ernie_chat" / "tasks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            if "block" in task:
                continue
            text = json.dumps({k: v for k, v in task.items() if k != "name"}, ensure_ascii=False)
            expressions = re.findall(r"\{\{.*?\}\}", text) + [
                json.dumps(task.get(k)) for k in ("when", "that", "failed_when", "changed_when") if k in task
            ]
            if any(token.search(e) for e in expressions) or "chat.env.j2" in text:
                handling[f"{path.name}: {task['name']}"] = task.get("no_log") is True or task.get("no_log") == "true"
    assert len(handling) >= 2, handling  # the preflight's look at the token and the chat.env template at least
    assert all(handling.values()), {name: ok for name, ok in handling.items() if not ok}
