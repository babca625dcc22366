"""The models a benchmark can serve (`--model tiny|real`): the cached directory, its served name and the config
sections that differ from tests/conftest.write_config's (the tiny model's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import CACHE
from tests.harness import real_model, tiny_model


@dataclass(frozen=True)
class BenchModel:
    served_name: str
    directory: Callable[[], Path]
    sections: dict = field(default_factory=dict)  # write_config(**sections)


MODELS = {
    "tiny": BenchModel(tiny_model.SERVED_NAME, lambda: tiny_model.cached(CACHE / "models")),
    # float32: on this CPU (AVX512-BF16, no AMX) the config's bf16 changes greedy answers and decodes slower
    # (tests/integration/test_real_model.py)
    "real": BenchModel(
        real_model.SERVED_NAME,
        lambda: real_model.cached(CACHE / "models"),
        {"model": {"served_name": real_model.SERVED_NAME}, "vllm": {"dtype": "float32"}},
    ),
}
