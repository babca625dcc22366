"""The model and venv links of upgrade.yml: a staged version never pushes out the serving one, and a refused upgrade's
rescue (restore.yml) points the links back with their old times. The roles' tasks files run for real on this machine
(tests/harness/role_tasks.py) against directories under tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness import role_tasks

OLD = 1_700_000_000.5  # a link time well before the run (the serving instance started after it)


def _versions(root: Path, names: list[str]) -> None:
    """Version directories, the first the oldest (the cleanup keeps the newest by mtime)."""
    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        os.utime(root / name, (OLD + i * 100, OLD + i * 100))


def _link(path: Path, target: str) -> None:
    path.symlink_to(target)
    os.utime(path, (OLD, OLD), follow_symlinks=False)


def test_staging_a_version_keeps_the_one_current_points_at_when_a_newer_one_was_never_served(tmp_path):
    # v1 serves; `refused` was staged (and refused) after it, so it is newer; v2 is staged now, not activated
    root = tmp_path / "models"
    _versions(root, ["v1", "refused", "v2"])
    _link(root / "current", "v1")
    run = role_tasks.run(tmp_path, "ernie_model", ["configure"], {"h": {}}, ernie_model_root=str(root), ernie_model_version="v2",
                         ernie_model_activate=False, ernie_model_keep_versions=1)  # fmt: skip
    assert run.rc == 0, run.output[-4000:]
    assert sorted(p.name for p in root.iterdir()) == ["current", "v1", "v2"], run.output[-4000:]
    assert os.readlink(root / "current") == "v1"


def test_a_switch_keeps_the_previous_version_and_restore_points_current_back_with_its_time(tmp_path):
    root = tmp_path / "models"
    _versions(root, ["v0", "v1", "v2"])
    _link(root / "current", "v1")
    run = role_tasks.run(tmp_path, "ernie_model", ["configure", "restore"], {"h": {}}, ernie_model_root=str(root),
                         ernie_model_version="v2", ernie_model_keep_versions=1)  # fmt: skip
    assert run.rc == 0, run.output[-4000:]
    assert sorted(p.name for p in root.iterdir()) == ["current", "v1", "v2"], "v1 is the rollback, v0 one too many"
    assert os.readlink(root / "current") == "v1"
    assert os.lstat(root / "current").st_mtime == OLD  # `ernie-ops apply` sees no model change since the instance started


def test_restore_points_the_venv_link_back_with_its_time_and_leaves_an_unswitched_one_alone(tmp_path):
    link = tmp_path / "venv"
    _link(link, str(tmp_path / "venvs" / "new"))
    previous = {"target": str(tmp_path / "venvs" / "old"), "mtime": OLD}
    run = role_tasks.run(tmp_path, "ernie_vllm", ["restore"], {"h": {}}, ernie_vllm_venv_link=str(link), ernie_vllm_previous=previous)
    assert run.rc == 0, run.output[-4000:]
    assert os.readlink(link) == previous["target"] and os.lstat(link).st_mtime == OLD
    assert run.recap()["h"]["changed"] == 1
    again = role_tasks.run(tmp_path, "ernie_vllm", ["restore"], {"h": {}}, ernie_vllm_venv_link=str(link), ernie_vllm_previous=previous)
    assert again.rc == 0 and again.recap()["h"]["changed"] == 0, again.output[-4000:]


def test_the_golden_set_variable_needs_a_file_and_a_gate_needs_a_set(tmp_path):
    golden = tmp_path / "golden.yaml"
    golden.write_text("cases: [{id: a, messages: [{role: user, content: Hi}], must_include: [Hello]}]\n")
    base = {"ernie_ops_instances": [{"port": 8000}, {"port": 8001}], "ernie_ops_active_port": 8000}
    gate = {"eval": {"min_pass_rate": 1.0}}
    hosts = {
        "ok": {**base, "ernie_ops_eval_set": str(golden), "ernie_ops_cutover": gate},
        "off": base,
        "on-host": {**base, "ernie_ops_cutover": {"eval": {"file": "/srv/golden.yaml"}}},
        "missing": {**base, "ernie_ops_eval_set": str(tmp_path / "nope.yaml"), "ernie_ops_cutover": gate},
        "both": {**base, "ernie_ops_eval_set": str(golden), "ernie_ops_cutover": {"eval": {"file": "/srv/golden.yaml"}}},
        "no-set": {**base, "ernie_ops_cutover": gate},
    }
    run = role_tasks.run(tmp_path, "ernie_ops", ["preflight"], hosts)
    assert role_tasks.failures(run) == {
        "missing": f"ernie_ops_eval_set {tmp_path / 'nope.yaml'} is not a file on the controller: give the path of a golden set (YAML)",
        "both": "ernie_ops_eval_set and ernie_ops_cutover.eval.file both name the golden set: give one of the two "
        "(ernie_ops_eval_set installs the file as /etc/ernie-ops/eval/golden.yaml and names it there)",
        "no-set": 'ernie_ops_cutover.eval {"min_pass_rate": 1.0} has no golden set, so no cutover would run one: set ernie_ops_eval_set '
        "(a file on the controller) or ernie_ops_cutover.eval.file (a file already on the host)",
    }, run.output[-4000:]
    assert all(run.recap()[h]["failed"] == 0 for h in ("ok", "off", "on-host")), run.recap()
