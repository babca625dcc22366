"""The pool upgrade's plan (traffic/pool_plan.py): surge where a slot has a second port and room for two, in place
otherwise, and what the pool keeps serving at each step."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.traffic import pool_plan


def gpus(util: float, replicas: int = 4) -> config.Config:
    ports = "".join(
        f"  - {{port: {8000 + 2 * k}, gpu: {k}, slot: {k}}}\n  - {{port: {8001 + 2 * k}, gpu: {k}, slot: {k}}}\n" for k in range(replicas)
    )
    return config.parse(f"vllm: {{accelerator: gpu, gpu_memory_utilization: {util}}}\npool: {{replicas: {replicas}}}\ninstances:\n{ports}")


def test_a_gpu_pool_with_room_for_two_surges_every_slot_and_keeps_all_replicas_serving():
    cfg = gpus(0.45)
    steps = pool_plan.plan(cfg, [8000, 8002, 8005, 8006], pool_plan.side_by_side_problem(cfg))
    assert [(s.old, s.new, s.surge, s.serving) for s in steps] == [(8000, 8001, True, 4), (8002, 8003, True, 4),
                                                                  (8005, 8004, True, 4), (8006, 8007, True, 4)]  # fmt: skip
    assert steps[2].describe() == (
        "slot 2 (gpu 2): surge: 8004 starts beside 8005, takes its place, 8005 drains and stops; 4 of 4 replicas serve meanwhile"
    )
    assert pool_plan.capacity(steps) == "at least 4 of 4 replicas serve at every step"


def test_a_full_card_is_replaced_in_place_with_the_reason_and_the_capacity_it_costs():
    cfg = gpus(0.9, replicas=2)
    steps = pool_plan.plan(cfg, [8000, 8002], pool_plan.side_by_side_problem(cfg))
    assert [(s.old, s.new, s.surge, s.serving) for s in steps] == [(8000, 8000, False, 1), (8002, 8002, False, 1)]
    assert "each with vllm.gpu_memory_utilization 0.9" in steps[0].why_in_place
    assert steps[0].describe().startswith("slot 0 (gpu 0): in place: 8000 leaves rotation, drains, restarts on the new version")
    assert steps[0].describe().endswith("; 1 of 2 replicas serve meanwhile")
    assert pool_plan.capacity(steps) == "at least 1 of 2 replicas serve at every step"


def test_cpu_cores_and_one_port_slots_are_replaced_in_place():
    """On CPU a slot is one set of cores with one port (config check refuses two instances on one set of cores), and
    the side-by-side rule says why even if asked."""
    cpu = config.parse(
        "vllm: {accelerator: cpu}\npool: {replicas: 2}\ninstances:\n"
        "  - {port: 8000, cpu_cores: '0-3', slot: 0}\n  - {port: 8002, cpu_cores: '4-7', slot: 1}\n"
    )
    steps = pool_plan.plan(cpu, [8000, 8002], pool_plan.side_by_side_problem(cpu))
    assert [(s.old, s.new, s.why_in_place) for s in steps] == [
        (8000, 8000, "the slot has no second port"),
        (8002, 8002, "the slot has no second port"),
    ]
    assert [s.device for s in steps] == ["cores 0-3", "cores 4-7"]
    assert pool_plan.side_by_side_problem(cpu)(8000, 8001) == pool_plan.CPU_SIDE_BY_SIDE


def test_replicas_that_do_not_match_the_slots_are_a_programming_error():
    cfg = gpus(0.45, replicas=2)
    with pytest.raises(ValueError, match="1 replicas for 2 slots"):
        pool_plan.plan(cfg, [8000], pool_plan.side_by_side_problem(cfg))
    assert pool_plan.capacity([]) == "nothing to replace"
