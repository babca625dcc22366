"""The real-model build's pieces that need no download: the wheel pin and the model role's manifest format."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from ernie_ops.serving import manifest
from tests.harness import real_model


def test_a_wheel_with_another_hash_is_refused_in_one_sentence(tmp_path: Path):
    wheel = tmp_path / real_model.WHEEL_FILE
    wheel.write_bytes(b"not the pinned upload")
    with pytest.raises(real_model.WheelRefused) as err:
        real_model.check_wheel(wheel)
    actual = hashlib.sha256(b"not the pinned upload").hexdigest()
    assert f"{real_model.WHEEL_FILE} has sha256 {actual}, not the pinned {real_model.WHEEL_SHA256}" in str(err.value)
    assert "update WHEEL_SHA256" in str(err.value)


def test_the_pinned_hash_is_accepted(tmp_path: Path):
    wheel = tmp_path / real_model.WHEEL_FILE
    wheel.write_bytes(b"some bytes")
    real_model.check_wheel(wheel, hashlib.sha256(b"some bytes").hexdigest())  # no exception


def test_manifest_is_what_the_model_role_writes_and_what_serve_checks(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    for name, data in {"config.json": b"{}", "b.txt": b"b", "sub/a.bin": b"a", "SHA256SUMS": b"old"}.items():
        (tmp_path / name).write_bytes(data)
    ours = real_model.manifest_lines(tmp_path)
    # the pipeline of ansible/roles/ernie_model/tasks/verify.yml, run by bash in the same directory
    role = "set -o pipefail; find . -type f ! -name SHA256SUMS -printf '%P\\0' | sort -z | xargs -0 -r sha256sum"
    env = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
    expected = subprocess.run(["bash", "-c", role], cwd=tmp_path, capture_output=True, text=True, check=True, env=env).stdout
    assert ours == expected.splitlines()
    (tmp_path / "SHA256SUMS").write_text("".join(line + "\n" for line in ours))
    report = manifest.check(tmp_path)
    assert report is not None and report.ok and report.files == 3, report


def test_the_fingerprint_follows_the_pinned_wheel(monkeypatch: pytest.MonkeyPatch):
    before = real_model.fingerprint()
    monkeypatch.setattr(real_model, "WHEEL_SHA256", "0" * 64)
    assert real_model.fingerprint() != before


def test_plain_config_drops_the_gguf_quantisation_and_asks_for_bf16():
    loaded = {"architectures": ["LlamaForCausalLM"], "dtype": "float32", "quantization_config": {"quant_method": "gguf"}}
    assert real_model.plain_config(loaded) == {"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16"}
