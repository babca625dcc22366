"""ernie_model's other sources on a fresh sandboxed host (`site.yml --tags model`, seconds each):
a tarball on the controller and a URL, both checksum-verified, staged, then `current` switched.
(The hub source needs huggingface.co, which these machines cannot reach.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import provision, sandbox, tiers

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e ansible model: {reason}")

ROOT = "/srv/models/ernie-tiny"


@pytest.fixture(scope="module")
def archive(tiny_model_dir):
    """The tiny model as an operator's tarball: one top directory, so strip_components=1.
    Under /var/tmp, not /tmp: the sandbox binds it from its overlay of /, where /tmp is its own."""
    work = Path(f"/var/tmp/ernie-ops-archive-{os.getpid()}")
    work.mkdir(exist_ok=True)
    out = work / "ernie-tiny.tar.gz"
    subprocess.run(["tar", "-czf", str(out), "-C", str(tiny_model_dir.parent), tiny_model_dir.name], check=True)
    try:
        yield out, "sha256:" + hashlib.sha256(out.read_bytes()).hexdigest()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(tiny_model_dir, archive):
    f = provision.Fleet(["ans-model"], tiny_model_dir, extra_ro={str(archive[0].parent): "/srv/mirror"})
    try:
        yield f
    finally:
        f.down()


def _model_run(fleet, version: str, source: dict):
    return fleet.playbook("site.yml", "--tags", "model", ernie_model_version=version, ernie_model_source=source)


def test_archive_on_the_controller_is_verified_and_becomes_current(fleet, archive):
    path, checksum = archive
    run = _model_run(fleet, "from-archive", {"type": "archive", "path": str(path), "checksum": checksum, "strip_components": 1})
    assert run.rc == 0, run.output[-4000:]
    sb = fleet.hosts["ans-model"]
    assert sb.run(f"readlink {ROOT}/current").stdout.strip() == "from-archive"
    assert sb.run(f"cd {ROOT}/current && test -f config.json && sha256sum --check --quiet SHA256SUMS").returncode == 0
    again = _model_run(fleet, "from-archive", {"type": "archive", "path": str(path), "checksum": checksum, "strip_components": 1})
    assert again.rc == 0 and again.recap()["ans-model"]["changed"] == 0, again.changed_tasks()


def test_archive_with_another_checksum_is_refused_and_current_stays(fleet, archive):
    path, _ = archive
    run = _model_run(fleet, "bad-archive", {"type": "archive", "path": str(path), "checksum": "sha256:" + "1" * 64, "strip_components": 1})
    assert run.rc != 0 and "a damaged or different archive. Nothing was installed." in run.output, run.output[-3000:]
    sb = fleet.hosts["ans-model"]
    assert sb.run(f"readlink {ROOT}/current").stdout.strip() == "from-archive"
    assert sb.run(f"test -e {ROOT}/bad-archive || test -e {ROOT}/.staging-bad-archive", check=False).returncode == 1


def test_url_source_is_downloaded_verified_and_switched_atomically(fleet, archive):
    path, checksum = archive
    sb = fleet.hosts["ans-model"]
    server = sb.spawn(["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1", "--directory", "/srv/mirror"])
    try:
        for _ in range(50):
            if sb.run("curl -sf -o /dev/null http://127.0.0.1:8765/", check=False).returncode == 0:
                break
            time.sleep(0.1)
        url = f"http://127.0.0.1:8765/{path.name}"
        run = _model_run(fleet, "from-url", {"type": "url", "url": url, "checksum": checksum, "strip_components": 1})
    finally:
        sandbox.Sandbox.signal_spawned(server, 15)
        server.communicate(timeout=10)
    assert run.rc == 0, run.output[-4000:]
    assert sb.run(f"readlink {ROOT}/current").stdout.strip() == "from-url"
    # at most one older version is kept for a rollback (ernie_model_keep_versions: 1); no staging or download left
    listing = sb.run(f"ls -A {ROOT}").stdout.split()
    assert {"current", "from-url"} <= set(listing) and len(listing) <= 3, listing
    assert not [f for f in listing if f.startswith(".")], listing
