"""The instances site.yml writes into ernie.yaml come from ernie-ops's layout (issue 33), found at provisioning: the
preflight role's GPU query (a stand-in nvidia-smi listing four cards: no GPU is lent here) and the ernie_ops role's
`ernie_layout` filter (ernie_ops/serving/layout.py), run for real by ansible-playbook (tests/harness/role_tasks.py):
one run, a host per case."""

from __future__ import annotations

import os

import yaml

from tests.harness import role_tasks

SMI = """#!/bin/sh
case "$1" in
  -L) for i in 0 1 2 3; do echo "GPU $i: NVIDIA A10 (UUID: GPU-$i)"; done ;;
  --query-gpu=index,memory.total) for i in 0 1 2 3; do echo "$i, 23028"; done ;;
  *) echo "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |" ;;
esac
"""
HOSTS = {"auto": {"ernie_ops_pool_replicas": "auto"}, "default": {}, "six": {"ernie_ops_pool_replicas": 6},
         "cpu": {"ernie_preflight_accelerator": "cpu"}}  # fmt: skip


def test_four_gpus_give_a_replica_on_each_one_replica_stays_the_pair_and_a_pool_too_big_is_refused(tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(SMI)
    smi.chmod(0o755)
    facts = {"ansible.builtin.setup": {"gather_subset": ["!all", "hardware"]}}  # processor_vcpus: this machine's
    step = {"ansible.builtin.include_role": {"name": "ernie_preflight", "tasks_from": "accelerator"}}
    before = [facts, {"block": [step], "environment": {"PATH": f"{smi.parent}:/usr/bin:/bin"}}]
    dest = f"{tmp_path}/{{{{ inventory_hostname }}}}.yaml"  # the config the ernie_ops role would write, rendered
    after = [{"ansible.builtin.copy": {"content": "{{ ernie_ops_config | to_nice_yaml }}", "dest": dest, "mode": "0644"}}]
    run = role_tasks.run(tmp_path, "ernie_ops", ["preflight"], HOSTS, before=before, after=after, ernie_model_root="/srv/models/ernie")
    written = {h: yaml.safe_load((tmp_path / f"{h}.yaml").read_text()) for h in HOSTS if (tmp_path / f"{h}.yaml").exists()}
    assert set(written) == {"auto", "default", "cpu"}, run.output[-4000:]
    auto = written["auto"]
    assert auto["vllm"]["accelerator"] == "gpu" and auto["pool"] == {"replicas": 4}, auto
    assert [(i["port"], i["gpu"], i["slot"]) for i in auto["instances"]] == [(8000 + 2 * k + d, k, k) for k in range(4) for d in (0, 1)]
    # the default: the host's ernie.yaml (and so its running engine) is what it was before pools
    assert "pool" not in written["default"] and written["default"]["instances"] == [{"port": 8000, "gpu": 0}, {"port": 8001, "gpu": 0}]
    half, vcpus = (os.cpu_count() or 1) // 2, os.cpu_count() or 1  # a CPU host: the pair on halves of its cores, as before
    assert written["cpu"]["instances"] == [{"port": 8000, "cpu_cores": f"0-{half - 1}"}, {"port": 8001, "cpu_cores": f"{half}-{vcpus - 1}"}]
    said = role_tasks.failures(run)
    refusal = "ernie_ops_pool_replicas 6: pool.replicas 6 on a host with 4 GPU(s): one replica per GPU; set at most 4"
    assert set(said) == {"six"} and refusal in said["six"], said
