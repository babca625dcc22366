"""The GPUs this host's NVIDIA driver lists (`nvidia-smi`), for the pool's layout (serving/layout.py)."""

from __future__ import annotations

import subprocess

from ernie_ops.errors import UsageError
from ernie_ops.serving.layout import QUERY, Gpu, parse_gpus


def listed() -> list[Gpu]:
    """The GPUs the driver lists (nvidia-smi's CSV)."""
    try:
        r = subprocess.run(QUERY, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UsageError("a GPU host without nvidia-smi: install the NVIDIA driver, or give --accelerator cpu") from None
    except subprocess.TimeoutExpired:
        raise UsageError("nvidia-smi did not answer within 60 s: check the driver (nvidia-smi -L)") from None
    if r.returncode != 0:
        raise UsageError(f"nvidia-smi failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}")
    return parse_gpus(r.stdout)
