"""ernie_ops.serving.manifest against real files: a safetensors file written by the safetensors library and a
SHA256SUMS written by the same shell pipeline as ansible/roles/ernie_model/tasks/verify.yml."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ernie_ops.serving import manifest

ROLE_PIPELINE = "set -o pipefail; find . -type f ! -name SHA256SUMS -printf '%P\\0' | sort -z | xargs -0 -r sha256sum > SHA256SUMS"


def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Ernie4_5ForCausalLM"]}))
    (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 1, "b": 2}}}))
    rng = np.random.default_rng(0)
    tensors = {"embed": rng.standard_normal((512, 1024), dtype=np.float32), "head": np.ones((8, 8), dtype=np.float32)}
    save_file(tensors, d / "model.safetensors")
    subprocess.run(["bash", "-c", ROLE_PIPELINE], cwd=d, check=True)
    return d


def test_no_manifest_is_not_checked(tmp_path):
    d = model_dir(tmp_path)
    (d / "SHA256SUMS").unlink()
    assert manifest.check(d) is None


def test_complete_copy_passes_and_hashes_every_listed_file(tmp_path):
    d = model_dir(tmp_path)
    report = manifest.check(d)
    assert report.ok, report.problems
    assert report.files == 3
    assert report.bytes_hashed == sum(p.stat().st_size for p in d.iterdir() if p.name != "SHA256SUMS")


def test_extra_files_are_ignored(tmp_path):
    d = model_dir(tmp_path)
    (d / "README.md").write_text("notes an operator added later")
    assert manifest.check(d).ok


def test_truncated_weights_name_both_sizes_and_the_remedy(tmp_path):
    d = model_dir(tmp_path)
    weights = d / "model.safetensors"
    full = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(full // 3)
    report = manifest.check(d)
    assert [p.name for p in report.problems] == ["model.safetensors"]
    assert report.bytes_hashed == 0, "a file known to be short is not hashed"
    text = manifest.describe(d, report, "re-run the model role")
    assert text == (
        f"model at {d} is incomplete: model.safetensors is {manifest.human_size(full // 3)} of "
        f"{manifest.human_size(full)} (its safetensors header); re-run the model role"
    )
    assert manifest.human_size(full) == "2.0 MB"


def test_missing_file_is_named(tmp_path):
    d = model_dir(tmp_path)
    (d / "tokenizer.json").unlink()
    report = manifest.check(d)
    assert [str(p) for p in report.problems] == ["tokenizer.json is missing (SHA256SUMS lists it)"]


def test_same_size_corruption_is_caught_by_the_hash(tmp_path):
    d = model_dir(tmp_path)
    weights = d / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # size and header intact: only the hash can see it
    weights.write_bytes(bytes(data))
    report = manifest.check(d)
    assert [p.name for p in report.problems] == ["model.safetensors"]
    assert "does not match its sha256 in SHA256SUMS" in report.problems[0].detail


def test_header_that_is_not_safetensors_is_named(tmp_path):
    d = model_dir(tmp_path)
    (d / "model.safetensors").write_bytes(b"\x01\x02")
    report = manifest.check(d)
    assert str(report.problems[0]) == "model.safetensors is 2 bytes with an unreadable safetensors header"


def test_malformed_manifest_line_names_file_and_line(tmp_path):
    d = model_dir(tmp_path)
    with (d / "SHA256SUMS").open("a") as f:
        f.write("not a checksum line\n")
    with pytest.raises(manifest.ManifestError, match=r"SHA256SUMS:4 is not a sha256sum line"):
        manifest.check(d)


def test_path_outside_the_directory_is_refused():
    with pytest.raises(manifest.ManifestError, match=r"outside the model directory"):
        manifest.parse("0" * 64 + "  ../etc/passwd\n")


def test_binary_marker_and_escaped_names_parse():
    entries = manifest.parse("A" * 64 + " *weights.bin\n\n\\" + "b" * 64 + "  odd\\nname\\\\x\n")
    assert entries == [manifest.Entry("weights.bin", "a" * 64), manifest.Entry("odd\nname\\x", "b" * 64)]
