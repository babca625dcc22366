"""`ernie-ops cutover` when nginx is not running: the preflight refuses before anything is started, and
nobody is told that traffic was put back on an old instance. Real nginx on a private prefix
(tests/harness/nginx.py), started and then stopped; no vLLM (nothing gets that far), no systemd unit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from ernie_ops import config
from ernie_ops.traffic import cutover, hostops
from tests.conftest import free_port
from tests.harness import nginx


class Recording:
    """The real host, with the names of the operations the runbook asked of it (nothing is faked)."""

    def __init__(self, real: hostops.RealHost):
        self.real, self.calls = real, []

    def __getattr__(self, name: str):
        op = getattr(self.real, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            return op(*args, **kwargs)

        return call


@pytest.fixture
def site(tmp_path):
    """A harness nginx routing to `source` (nothing listens there) and a config naming source and target;
    the instances are on two GPUs, so the memory budget passes whatever this machine has free."""
    source, target = free_port(), free_port()
    ng = nginx.prepare(tmp_path / "nginx", free_port(), source)
    data = {
        "vllm": {"accelerator": "gpu"},
        "instances": [{"port": source, "gpu": 0}, {"port": target, "gpu": 1}],
        "gateway": ng.gateway_config(),
        "paths": {"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")},
    }
    cfg_file = tmp_path / "ernie.yaml"
    cfg_file.write_text(yaml.safe_dump(data))
    try:
        yield ng, cfg_file, source, target
    finally:
        ng.stop()


def test_cutover_with_nginx_stopped_aborts_in_the_preflight_and_changes_nothing(site):
    ng, cfg_file, source, target = site
    cfg = config.load(str(cfg_file))
    pid_file = ng.pid_file

    ng.start()
    host = Recording(hostops.RealHost(cfg))
    running = cutover.Cutover(cfg, target, dry_run=True, host=host).run()
    assert running.ok and running.outcome == "dry-run" and "nginx runs" in running.steps[0].detail, running
    assert hostops.RealHost(cfg).nginx_problem() is None

    ng.stop()
    before = ng.upstream_file.read_text()
    host = Recording(hostops.RealHost(cfg))
    res = cutover.Cutover(cfg, target, host=host).run()
    assert res.outcome == "aborted" and not res.ok and res.source == source and [s.name for s in res.steps] == ["preflight"], res
    assert res.error == (
        f"nginx is not running (no master process for pid file {pid_file}); start it (systemctl start nginx) and rerun; nothing was changed"
    )
    assert not {"unit_state", "start", "gate", "switch", "stop"} & set(host.calls), host.calls  # no instance was even looked at
    assert ng.upstream_file.read_text() == before
    assert res.traffic is None and "no instance serves through the gateway" in res.where

    # what the operator reads: no claim that traffic went back to an old instance
    cli = subprocess.run(
        [sys.executable, "-m", "ernie_ops", "--config", str(cfg_file), "cutover", str(target)], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 1, cli.stderr
    said = " ".join(cli.stderr.split())
    assert "cutover aborted" in said and "nginx is not running" in said and "nothing was changed" in said, said
    assert "put back" not in said and "keeps serving" not in said and "Traceback" not in said, said


def test_a_pid_file_naming_a_process_that_is_not_nginx_is_not_a_running_nginx(site):
    """A pid file left behind (nginx killed, host crashed) whose number now belongs to another program."""
    ng, cfg_file, _, target = site
    cfg = config.load(str(cfg_file))
    pid_file = ng.pid_file
    pid_file.write_text(f"{os.getpid()}\n")  # alive, and pytest
    res = cutover.Cutover(cfg, target).run()
    assert res.outcome == "aborted" and f"no master process for pid file {pid_file}" in res.error, res
    assert [s.name for s in res.steps] == ["preflight"]


def test_nginx_takes_a_pool_include_and_its_keyed_twin_in_the_shipped_upstream_blocks(tmp_path):
    """`render_pool`'s include (least_conn, a zone, a replica down) and its keyed twin (`hash` on the session key, or
    the pool's own balancing with affinity off), as `Gateway.write_upstream` writes them, in the project's unchanged
    ernie-ops.conf pass `nginx -t` without a warning (two balancing methods in one block are only a warning there)."""
    from ernie_ops.traffic import gateway

    ng = nginx.prepare(tmp_path / "ng", free_port(), free_port())
    for affinity in (True, False):
        gw = ng.gateway(session_affinity=affinity)
        gw.write_upstream(gateway.render_pool([8000, 8002, 8004], down=frozenset({8002})))
        checked = subprocess.run([nginx.NGINX, "-t", *ng.args], capture_output=True, text=True)
        assert checked.returncode == 0 and "[warn]" not in checked.stderr, (affinity, checked.stderr, gw.keyed.read_text())
