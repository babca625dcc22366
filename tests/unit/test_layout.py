"""`serving/layout`: the instances a host runs, from its GPUs (nvidia-smi's CSV) or its cores (issue 33)."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.errors import UsageError
from ernie_ops.serving import layout

FOUR_A10 = "0, 23028 MiB\n1, 23028 MiB\n2, 23028 MiB\n3, 23028 MiB\n"


def as_config(found: layout.Layout, accelerator: str) -> config.Config:
    """The layout as ernie.yaml sections, through the config's own checks (a layout config check refuses is a bug)."""
    return config.Config.model_validate({"model": {"path": "/srv/models/m"}, "vllm": {"accelerator": accelerator}, **found.as_dict()})


def test_a_four_gpu_host_gets_a_slot_per_gpu_with_its_surge_port():
    found = layout.layout("gpu", None, layout.parse_gpus(FOUR_A10), vcpus=32)
    assert found.replicas == 4
    assert [(i["port"], i["gpu"], i["slot"]) for i in found.instances] == [
        (8000, 0, 0), (8001, 0, 0), (8002, 1, 1), (8003, 1, 1), (8004, 2, 2), (8005, 2, 2), (8006, 3, 3), (8007, 3, 3)
    ]  # fmt: skip
    slots = as_config(found, "gpu").slots()
    assert [(s.index, s.ports, s.gpu) for s in slots] == [(k, (8000 + 2 * k, 8001 + 2 * k), k) for k in range(4)]
    two = layout.layout("gpu", 2, layout.parse_gpus(FOUR_A10), vcpus=32)  # fewer replicas than cards: the first ones
    assert two.replicas == 2 and {i["gpu"] for i in two.instances} == {0, 1}


def test_one_replica_is_the_routed_instance_and_its_spare_as_before():
    assert layout.layout("gpu", None, layout.parse_gpus("0, 23028\n"), vcpus=8).as_dict() == {
        "pool": {"replicas": 1}, "instances": [{"port": 8000, "gpu": 0}, {"port": 8001, "gpu": 0}]
    }  # fmt: skip
    cpu = layout.layout("cpu", None, [], vcpus=6)  # no cores_per_replica: today's pair on halves
    assert cpu.instances == [{"port": 8000, "cpu_cores": "0-2"}, {"port": 8001, "cpu_cores": "3-5"}]
    assert layout.layout("cpu", None, [], vcpus=1).instances == [{"port": 8000, "cpu_cores": "0"}]
    # the text hosts provisioned before pools have (their ernie.yaml, and so their engine, stays as it was)
    assert [i["cpu_cores"] for i in layout.layout("cpu", None, [], vcpus=2).instances] == ["0-0", "1-1"]
    assert layout.layout("cpu", None, [], vcpus=4, cores_per_replica=4).replicas == 1  # a pool of one is the pair
    assert as_config(cpu, "cpu").slots()[0].ports == (8000, 8001)


def test_a_cpu_pool_splits_the_cores_into_replicas_of_the_configured_size():
    found = layout.layout("cpu", None, [], vcpus=8, cores_per_replica=3)  # 2 fit; cores 6-7 left to the host
    assert found.replicas == 2
    assert found.instances == [{"port": 8000, "cpu_cores": "0-2", "slot": 0}, {"port": 8001, "cpu_cores": "3-5", "slot": 1}]
    one_core = layout.layout("cpu", 2, [], vcpus=2, cores_per_replica=1)
    assert [i["cpu_cores"] for i in one_core.instances] == ["0", "1"]
    assert [s.cpu_cores for s in as_config(one_core, "cpu").slots()] == ["0", "1"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("gpu", 5, FOUR_A10, 32, None), "pool.replicas 5 on a host with 4 GPU(s): one replica per GPU; set at most 4"),
        (("gpu", None, "", 32, None), "nvidia-smi lists no GPU"),
        (("cpu", 3, "", 4, 2), "pool of 3 replica(s) of 2 core(s) on a host with 4 vCPU(s): at most 2 fit"),
        (("cpu", None, "", 4, 0), "cores per replica 0: give at least 1"),
        (("tpu", None, "", 4, None), "accelerator 'tpu': give gpu or cpu"),
        (("gpu", None, "0, lots\n", 4, None), "nvidia-smi line 1 is not 'index, memory in MiB': '0, lots'"),
    ],
)
def test_a_layout_that_cannot_fit_is_refused_with_the_numbers(args, said):
    accelerator, replicas, csv, vcpus, per = args
    with pytest.raises(UsageError, match=said.replace("(", r"\(").replace(")", r"\)")):
        layout.layout(accelerator, replicas, layout.parse_gpus(csv), vcpus, per)


def test_the_command_asks_the_driver_and_says_what_is_wrong_without_a_traceback(tmp_path, monkeypatch, capsys):
    """`ernie-ops layout` with a stand-in nvidia-smi (no GPU is lent here) that lists four cards, then one that fails."""
    import json

    from ernie_ops.cli import main

    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ \"$1\" = --query-gpu=index,memory.total ] && printf '{FOUR_A10}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert main(["layout", "--accelerator", "gpu", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["pool"] == {"replicas": 4} and [i["gpu"] for i in said["instances"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\nexit 9\n")
    assert main(["layout", "--accelerator", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "nvidia-smi failed (exit 9): NVIDIA-SMI has failed" in err and "Traceback" not in err
