"""docs/configuration-reference.md is what the schema gives (docs/config_reference.py): a key added, renamed or given
another default in the code without regenerating the reference fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_the_schema():
    assert generator().main(["--check"]) == 0, "docs/configuration-reference.md is stale: run `python docs/config_reference.py`"


def test_a_stale_reference_is_caught(tmp_path, monkeypatch, capsys):
    ref = generator()
    stale = tmp_path / "configuration-reference.md"
    fresh = ref.render()
    assert "| `vllm.max_model_len` | int | 8192 |" in fresh
    stale.write_text(fresh.replace("| `vllm.max_model_len` | int | 8192 |", "| `vllm.max_model_len` | int | 2048 |"))
    monkeypatch.setattr(ref, "OUT", stale)
    monkeypatch.setattr(ref, "ROOT", tmp_path)
    assert ref.main(["--check"]) == 1 and "differs from the schema" in capsys.readouterr().err
    assert "| `chat.upload_quota_mb` | float | 500.0 |" in ref.render()  # every section's keys, a nested app's too
