"""Bad variables and bad weights fail site.yml with a clear message before anything changes.

One fresh sandboxed host. The variable mistakes that need nothing on the host are tried in ONE run: each is an
inventory name of its own (`bad-...`) standing for the same host, so each fails at the check of the role that owns
its wrong input, with its own message naming it, and the host is looked at once afterwards (no run may change it).
The cases that change the host first (a full disk, a stub `nvidia-smi`: there is no GPU on these machines, and the
stub is the only way to show the driver check) and those that go past preflight run alone, in order.
"""

from __future__ import annotations

import pytest

from tests.harness import provision, sandbox, tiers

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e ansible preflight: {reason}")

NVIDIA_SMI_STUB = """#!/bin/sh
# test stub: a host with one GPU whose driver supports CUDA 12.1 only
if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA A10 (UUID: GPU-00000000-0000-0000-0000-000000000000)"; exit 0; fi
echo "| NVIDIA-SMI 530.30.02    Driver Version: 530.30.02    CUDA Version: 12.1     |"
"""


@pytest.fixture(scope="module")
def fleet(tiny_model_dir):
    f = provision.Fleet(["ans-bad"], tiny_model_dir)
    try:
        yield f
    finally:
        f.down()


def _untouched(sb) -> None:
    assert sb.run("test -e /opt/ernie-ops || test -e /etc/ernie-ops || test -e /srv/models/ernie-tiny", check=False).returncode == 1


def _fails_in_preflight_untouched(fleet, *args: str, owner: str = "ernie_preflight", **overrides) -> str:
    """The check that fails belongs to `owner`, the role whose input is wrong (its tasks/preflight.yml,
    run by ernie_preflight before any role changes the host)."""
    run = fleet.playbook("site.yml", *args, **overrides)
    recap = run.recap()["ans-bad"]
    assert run.rc != 0 and recap["failed"] == 1, run.output[-4000:]
    assert recap["changed"] == 0, run.changed_tasks()
    _untouched(fleet.hosts["ans-bad"])
    failed_task = [line for line in run.output.splitlines() if line.startswith("TASK [")][-1]
    assert f"[{owner} : " in failed_task, failed_task
    return run.output


# the edge as this host's own HTTPS front: the gateway moved to loopback, out of the edge's way
EDGE = {"ernie_edge_enabled": True, "ernie_nginx_listen_address": "127.0.0.1", "ernie_nginx_port": 8080}
# {inventory name: (the role whose check refuses it, its variables)}, tried together by `refused`
MISTAKES = {
    "bad-accelerator": ("ernie_preflight", {"ernie_preflight_accelerator": "tpu"}),
    "bad-source-path": ("ernie_model", {"ernie_model_source": {"type": "path", "path": "/srv/seed/nowhere"}}),
    "bad-hub-revision": ("ernie_model", {"ernie_model_source": {"type": "hub", "repo": "baidu/ERNIE-4.5-0.3B-PT", "revision": "main"}}),
    "bad-gpu-forced": ("ernie_preflight", {"ernie_preflight_accelerator": "gpu"}),
    "bad-source-key": ("ernie_model", {"ernie_model_source": {"type": "path", "path": "/srv/seed", "pth": "x"}}),
    "bad-ports": ("ernie_ops", {"ernie_ops_instances": [{"port": 8000, "cpu_cores": "0"}, {"port": 8000, "cpu_cores": "1"}]}),
    "bad-edge-no-cert": ("ernie_edge", EDGE),
    "bad-edge-cert-path": (
        "ernie_edge",
        {**EDGE, "ernie_edge_tls_certificate_path": "/etc/ssl/live/gw.pem", "ernie_edge_tls_private_key_path": "/etc/ssl/live/gw.key"},
    ),
    "bad-edge-port": ("ernie_edge", {"ernie_edge_enabled": True, "ernie_edge_tls_self_signed": True}),
}


@pytest.fixture(scope="module")
def refused(fleet) -> provision.Run:
    """One site.yml with every mistake of MISTAKES at once; the host, shared by all, must be as it was."""
    run = fleet.playbook("site.yml", aliases={name: extra for name, (_, extra) in MISTAKES.items()})
    print(f"\nsite.yml with {len(MISTAKES)} mistakes at once: {run.seconds:.0f} s, rc {run.rc}")
    assert run.rc != 0 and set(run.recap()) == set(MISTAKES), run.output[-4000:]
    assert all(r["changed"] == 0 for r in run.recap().values()), run.changed_tasks()
    _untouched(fleet.hosts["ans-bad"])
    return run


def _refusal(refused: provision.Run, name: str) -> str:
    """The message `name` was refused with, by the check of the role that owns its input (its tasks/preflight.yml)."""
    owner = MISTAKES[name][0]
    task, message = refused.failed_task(name)
    assert refused.recap()[name]["failed"] == 1 and task.startswith(f"{owner} : "), (name, task, refused.recap()[name])
    return message


def test_unknown_accelerator_is_refused(refused):
    out = _refusal(refused, "bad-accelerator")
    assert "ernie_preflight_accelerator" in out and "tpu" in out and "auto, gpu, cpu" in out


def test_missing_model_source_is_refused(refused):
    out = _refusal(refused, "bad-source-path")
    assert "ernie_model_source.path /srv/seed/nowhere is not a directory on bad-source-path" in out


def test_unpinned_hub_revision_is_refused(refused):
    out = _refusal(refused, "bad-hub-revision")
    assert "ernie_model_source is incomplete" in out and "must be a commit id" in out


def test_full_model_disk_is_refused(fleet):
    sb = fleet.hosts["ans-bad"]
    sb.run("mkdir -p /srv/full && mount -t tmpfs -o size=1m tmpfs /srv/full")
    try:
        out = _fails_in_preflight_untouched(fleet, owner="ernie_model", ernie_model_root="/srv/full/ernie-tiny")
    finally:
        sb.run("umount /srv/full && rmdir /srv/full")
    assert "/srv/full/ernie-tiny has 0.0 GB free" in out and "ernie_model_min_free_gb" in out


def test_driver_too_old_for_the_pinned_vllm_is_refused(fleet):
    sb = fleet.hosts["ans-bad"]
    sb.write("/usr/local/bin/nvidia-smi", NVIDIA_SMI_STUB, mode="0755")
    try:
        out = _fails_in_preflight_untouched(fleet, ernie_preflight_accelerator="auto")
    finally:
        sb.run("rm -f /usr/local/bin/nvidia-smi")
    assert "the NVIDIA driver supports CUDA 12.1 but the pinned vLLM wheel needs CUDA >= 12.9" in out


def test_gpu_forced_without_a_gpu_is_refused(refused):
    out = _refusal(refused, "bad-gpu-forced")
    assert "ernie_preflight_accelerator is gpu but `nvidia-smi -L` lists no GPU" in out


def test_a_source_key_the_role_does_not_know_is_refused_by_its_argument_spec(refused):
    out = _refusal(refused, "bad-source-key")
    assert "pth" in out and "ernie_model_source" in out


def test_duplicate_instance_ports_are_refused_by_the_role_that_owns_them(refused):
    out = _refusal(refused, "bad-ports")
    assert "unique ports" in out


def test_an_edge_without_a_certificate_is_refused(refused):
    out = _refusal(refused, "bad-edge-no-cert")
    assert "ernie_edge on bad-edge-no-cert needs exactly one certificate source" in out and "(labs only)" in out


def test_an_edge_certificate_path_that_does_not_exist_is_refused(refused):
    out = _refusal(refused, "bad-edge-cert-path")
    assert "/etc/ssl/live/gw.pem and /etc/ssl/live/gw.key not found on bad-edge-cert-path" in out


def test_an_edge_on_the_port_of_this_host_s_gateway_is_refused(refused):
    out = _refusal(refused, "bad-edge-port")
    assert "On bad-edge-port the edge listens on ports 80 and 443, and this host's gateway on every address port 80" in out
    assert "ernie_nginx_listen_address: 127.0.0.1 and ernie_nginx_port: 8080" in out


def test_weights_with_a_wrong_checksum_never_become_current(fleet):
    """Past preflight: the model role stages, finds the mismatch, and leaves `current` absent."""
    run = fleet.playbook("site.yml", "--tags", "model", ernie_model_checksums={"config.json": "0" * 64})
    assert run.rc != 0, run.output[-4000:]
    assert "does not match ernie_model_checksums" in run.output and "config.json: FAILED" in run.output
    sb = fleet.hosts["ans-bad"]
    assert sb.run("test -e /srv/models/ernie-tiny/current || test -e /srv/models/ernie-tiny/tiny-v1", check=False).returncode == 1
    assert sb.run("test -d /srv/models/ernie-tiny/.staging-tiny-v1").returncode == 0  # kept for inspection


def test_the_gateway_alone_on_a_host_without_ernie_ops_says_what_to_run(fleet):
    """`--tags nginx` alone, local mode, where ernie-ops was never installed: the route has no owner."""
    run = fleet.playbook("site.yml", "--tags", "nginx")
    assert run.rc != 0, run.output[-4000:]
    assert "/opt/ernie-ops/venv/bin/ernie-ops and /etc/ernie-ops/ernie.yaml missing on ans-bad" in run.output
    assert "Nothing was changed" in run.output
    assert fleet.hosts["ans-bad"].run("test -e /etc/nginx/ernie-ops", check=False).returncode == 1


def test_an_edge_config_nginx_rejects_is_rolled_back_and_the_edge_keeps_serving(fleet):
    """Past preflight: a value only `nginx -t` can judge (an address that is none). The previous files come back, the
    edge is not reloaded and serves as before (the role's validate-or-restore block, as the gateway role's)."""
    sb = fleet.hosts["ans-bad"]
    good = fleet.playbook("site.yml", "--tags", "edge", ernie_edge_tls_self_signed=True, **EDGE)
    assert good.rc == 0, good.output[-4000:]
    upstream = "/etc/ernie-ops/edge/ernie-edge/upstream.conf"
    before = sb.run(f"cat {upstream}").stdout
    master = sb.show("ernie-edge.service", "MainPID")
    backends = ["127.0.0.1:8080", "999.1.1.1:80"]
    bad = fleet.playbook("site.yml", "--tags", "edge", ernie_edge_tls_self_signed=True, ernie_edge_backends=backends, **EDGE)
    assert bad.rc != 0, bad.output[-4000:]
    assert "nginx -t rejected the new edge configuration; the previous files are back" in bad.output
    assert "999.1.1.1" in bad.output  # nginx's own words name the bad value
    assert sb.run(f"cat {upstream}").stdout == before
    assert sb.run("nginx -t -c /etc/ernie-ops/edge/nginx.conf", check=False).returncode == 0, "a broken file left behind"
    assert not sb.run("ls /etc/ernie-ops/edge /etc/ernie-ops/edge/ernie-edge").stdout.count("~"), "backups left behind"
    assert sb.show("ernie-edge.service", "MainPID") == master
    assert sb.run(["curl", "-s", "http://127.0.0.1/healthz"]).stdout == "ok\n"
    # the lab certificate, for the host's name, verifies against itself as the CA
    lab = ["curl", "-s", "--cacert", "/etc/ernie-ops/tls/gateway.crt", "--resolve", "ans-bad:443:127.0.0.1", "https://ans-bad/healthz"]
    assert sb.run(lab).stdout == "ok\n"
