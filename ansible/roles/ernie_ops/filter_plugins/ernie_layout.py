"""`ernie_layout`: the pool and instances a host runs, decided by ernie-ops's own code (ernie_ops/serving/layout.py,
the same function `ernie-ops layout` runs), never re-derived in Jinja. On the controller: the repository this role
belongs to is on its path (pure Python, no dependency), so a fresh host needs nothing installed to get its layout."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

REPO = Path(__file__).resolve().parents[4]  # ansible/roles/ernie_ops/filter_plugins/ -> the repository


def ernie_layout(gpu_csv: str, accelerator: str, replicas: object = 1, vcpus: int = 1, cores_per_replica: int = 0) -> dict:
    """{"pool": {"replicas": n}, "instances": [...]}: `gpu_csv` nvidia-smi's `--query-gpu=index,memory.total` output
    ("" on a CPU host), `replicas` a number or "auto", `cores_per_replica` 0 for none."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from ernie_ops.errors import UsageError
    from ernie_ops.serving import layout

    wanted = None if str(replicas) == "auto" else int(replicas)
    try:
        found = layout.layout(accelerator, wanted, layout.parse_gpus(gpu_csv or ""), int(vcpus), int(cores_per_replica) or None)
    except UsageError as exc:
        raise AnsibleFilterError(f"ernie_ops_pool_replicas {replicas!r}: {exc}") from None
    return found.as_dict()


class FilterModule:
    def filters(self) -> dict:
        return {"ernie_layout": ernie_layout}
