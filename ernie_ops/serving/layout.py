"""Which instances a host runs: the `instances:` list of ernie.yaml, from what the host has (issue 33).

Found at provisioning, never typed by hand: the `ernie_ops` role asks `ernie-ops layout` and writes its answer.
- One replica (the default): today's pair, a routed instance and the spare the next cutover starts: both on GPU 0,
  or each on its own half of the cores (two on the same cores: the second never became ready, measured).
- A pool on a GPU host: one slot per GPU the driver lists, ports 8000+2k (serving) and 8001+2k (where the slot's
  next version starts beside it, when the card has room) on GPU k.
- A pool on a CPU host: `vcpus // cores_per_replica` slots of consecutive cores, one port each (8000+k): a CPU slot
  is upgraded in place (out of rotation, restarted, back), so it needs no second port.
Pure: the GPU list comes in as `nvidia-smi`'s CSV, parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ernie_ops.errors import UsageError

BASE_PORT = 8000
QUERY = ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class Gpu:
    index: int
    memory_mib: int


def parse_gpus(csv_text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,memory.total --format=csv,noheader,nounits` -> GPUs (a "MiB" unit is taken too)."""
    gpus = []
    for n, line in enumerate(csv_text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)(?:\s*MiB)?\s*", line)
        if m is None:
            raise UsageError(f"nvidia-smi line {n} is not 'index, memory in MiB': {line.strip()!r}")
        gpus.append(Gpu(int(m.group(1)), int(m.group(2))))
    return gpus


def cores(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def single(accelerator: str, vcpus: int) -> list[dict]:
    """One replica: the routed instance and its spare (one instance on a 1-vCPU CPU host: changes restart it)."""
    if accelerator == "gpu":
        return [{"port": BASE_PORT, "gpu": 0}, {"port": BASE_PORT + 1, "gpu": 0}]
    if vcpus <= 1:
        return [{"port": BASE_PORT, "cpu_cores": "0"}]
    half = vcpus // 2  # written "first-last" even for one core: the exact text hosts provisioned before pools have
    return [{"port": BASE_PORT, "cpu_cores": f"0-{half - 1}"}, {"port": BASE_PORT + 1, "cpu_cores": f"{half}-{vcpus - 1}"}]


def pool(accelerator: str, replicas: int | None, gpus: list[Gpu], vcpus: int, cores_per_replica: int) -> list[dict]:
    """The instances of a pool of `replicas` slots (None: as many as the host has room for), each naming its slot."""
    if accelerator == "gpu":
        if not gpus:
            raise UsageError("a GPU host whose nvidia-smi lists no GPU: check the driver (nvidia-smi -L), or set the accelerator to cpu")
        room = len(gpus)
        n = room if replicas is None else replicas
        if n > room:
            raise UsageError(f"pool.replicas {n} on a host with {room} GPU(s): one replica per GPU; set at most {room}")
        return [
            {"port": BASE_PORT + 2 * k + d, "gpu": gpu.index, "slot": k} for k, gpu in enumerate(sorted(gpus, key=lambda g: g.index)[:n])
            for d in (0, 1)
        ]  # fmt: skip
    if cores_per_replica < 1:
        raise UsageError(f"cores per replica {cores_per_replica}: give at least 1")
    room = vcpus // cores_per_replica
    n = room if replicas is None else replicas
    if n < 1 or n > room:
        raise UsageError(
            f"pool of {n} replica(s) of {cores_per_replica} core(s) on a host with {vcpus} vCPU(s): "
            f"at most {room} fit; lower the replicas or the cores per replica"
        )
    return [{"port": BASE_PORT + k, "cpu_cores": cores(k * cores_per_replica, cores_per_replica), "slot": k} for k in range(n)]


@dataclass(frozen=True)
class Layout:
    replicas: int
    instances: list[dict]

    def as_dict(self) -> dict:
        """ernie.yaml's `pool:` and `instances:` sections."""
        return {"pool": {"replicas": self.replicas}, "instances": self.instances}


def layout(accelerator: str, replicas: int | None, gpus: list[Gpu], vcpus: int, cores_per_replica: int | None = None) -> Layout:
    """This host's pool and instances. `replicas`: N, or None for as many as the host has room for: one per GPU the
    driver lists; on a CPU host one per `cores_per_replica` cores, or today's single replica when that is not set."""
    if accelerator not in ("gpu", "cpu"):
        raise UsageError(f"accelerator {accelerator!r}: give gpu or cpu (the one provisioning resolved)")
    if replicas is None and accelerator == "cpu" and cores_per_replica is None:
        replicas = 1
    if replicas == 1:
        return Layout(1, single(accelerator, vcpus))
    found = pool(accelerator, replicas, gpus, vcpus, 1 if cores_per_replica is None else cores_per_replica)
    slots = len({i["slot"] for i in found})
    return Layout(1, single(accelerator, vcpus)) if slots == 1 else Layout(slots, found)  # a pool of one is today's pair
