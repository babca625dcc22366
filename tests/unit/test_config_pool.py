"""The pool section of ernie.yaml (issue 33): slots grouped from `instances[].slot`, and every pool that cannot serve
refused by `config check` with the numbers and the fix, all at once with file:line like every other problem."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.config import Slot
from ernie_ops.errors import ConfigError


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config.parse(text, "ernie.yaml")
    return [f"{p.line}: {p.field}: {p.message}" for p in info.value.problems]


FOUR_GPUS = """\
vllm: {accelerator: gpu, gpu_memory_utilization: 0.45}
pool: {replicas: 4}
instances:
""" + "".join(f"  - {{port: {8000 + 2 * k}, gpu: {k}, slot: {k}}}\n  - {{port: {8001 + 2 * k}, gpu: {k}, slot: {k}}}\n" for k in range(4))


def test_one_replica_is_todays_host_a_routed_instance_and_its_spare():
    cfg = config.parse("", "ernie.yaml")
    assert cfg.pool.replicas == 1 and cfg.pool.balance == "least_conn" and cfg.pool.session_affinity
    assert cfg.slots() == [Slot(0, (8000, 8001))]


def test_a_four_gpu_host_has_four_slots_each_with_its_surge_port_on_its_card():
    cfg = config.parse(FOUR_GPUS, "ernie.yaml")
    assert cfg.slots() == [Slot(k, (8000 + 2 * k, 8001 + 2 * k), gpu=k) for k in range(4)]
    assert [s.device() for s in cfg.slots()] == ["gpu 0", "gpu 1", "gpu 2", "gpu 3"]


def test_a_cpu_host_has_one_port_per_core_group():
    cfg = config.parse(
        "vllm: {accelerator: cpu}\npool: {replicas: 2}\ninstances:\n"
        "  - {port: 8000, cpu_cores: '0-3', slot: 0}\n  - {port: 8001, cpu_cores: '4-7', slot: 1}\n",
        "ernie.yaml",
    )
    assert cfg.slots() == [Slot(0, (8000,), cpu_cores="0-3"), Slot(1, (8001,), cpu_cores="4-7")]


def test_unnamed_out_of_range_and_empty_slots_are_refused_with_the_fix():
    said = problems(
        "pool: {replicas: 3}\ninstances:\n  - {port: 8000, gpu: 0, slot: 0}\n  - {port: 8002, gpu: 1}\n  - {port: 8004, gpu: 2, slot: 5}\n"
    )
    assert said == [
        "4: instances[1].slot: not set for instance 8002, but pool.replicas is 3: give every instance its slot (0-2); "
        "the ernie_vllm role fills them from nvidia-smi or the host's cores",
        "5: instances[2].slot: 5 for instance 8004, but pool.replicas 3 has slots 0-2: raise pool.replicas or give this "
        "instance one of those slots",
    ]
    said = problems("pool: {replicas: 3}\ninstances:\n  - {port: 8000, gpu: 0, slot: 0}\n  - {port: 8002, gpu: 1, slot: 1}\n")
    assert said == ["1: pool.replicas: 3, but no instance serves slot(s) 2: add an instance per missing slot or lower pool.replicas to 2"]
    said = problems("instances:\n  - {port: 8000, slot: 0}\n  - {port: 8001}\n")  # one replica, slots half named
    assert said == [
        "3: instances[1].slot: not set for instance 8001, but other instances name theirs: with pool.replicas 1 give every "
        "instance slot 0, or name none"
    ]


def test_a_slot_spread_over_two_devices_or_with_two_surge_ports_is_refused():
    said = problems(
        "pool: {replicas: 1}\ninstances:\n  - {port: 8000, gpu: 0, slot: 0}\n  - {port: 8001, gpu: 1, slot: 0}\n"
        "  - {port: 8002, gpu: 0, slot: 0}\n"
    )
    assert any("slot 0 has ports 8000, 8001, 8002: a slot holds its replica and at most one surge port" in p for p in said), said
    assert any(
        "slot 0's ports name different devices: 8000 (gpu 0), 8001 (gpu 1), 8002 (gpu 0); a surge port starts beside its replica" in p
        for p in said
    ), said


def test_more_slots_on_one_gpu_than_its_memory_holds_are_refused_with_the_utilization_that_fits():
    text = (
        "vllm: {accelerator: gpu, gpu_memory_utilization: 0.45}\npool: {replicas: 3}\ninstances:\n"
        "  - {port: 8000, gpu: 0, slot: 0}\n  - {port: 8002, gpu: 0, slot: 1}\n  - {port: 8004, gpu: 0, slot: 2}\n"
    )
    assert problems(text) == [
        "2: pool.replicas: gpu 0 carries slots 0, 1, 2, each with vllm.gpu_memory_utilization 0.45: together 1.35 of it "
        "(limit 0.95); set vllm.gpu_memory_utilization <= 0.32 or move slots to other GPUs"
    ]
    assert len(config.parse(text.replace("0.45", "0.3"), "ernie.yaml").slots()) == 3  # three small replicas share a big card


def test_cpu_slots_on_overlapping_cores_are_refused_by_the_core_check():
    said = problems(
        "vllm: {accelerator: cpu}\npool: {replicas: 2}\ninstances:\n"
        "  - {port: 8000, cpu_cores: '0-3', slot: 0}\n  - {port: 8001, cpu_cores: '3-5', slot: 1}\n"
    )
    assert len(said) == 1 and "instance 8001 shares core(s) 3 with instance 8000" in said[0], said
