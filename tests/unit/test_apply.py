"""`ernie-ops route` / `apply`: decisions from what runs and when its inputs changed.

Real files on disk for the time rules (symlink switches, rewritten files); systemd and the cutover
are a recording fake host here (the real ones run in tests/e2e/test_ansible.py, through Ansible).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import UsageError
from ernie_ops.host import systemd
from ernie_ops.operate import apply
from ernie_ops.traffic import cutover, gateway
from ernie_ops.traffic.gateway import GatewayError
from tests.harness import runbook_host


def _cfg(tmp_path: Path, upstream: str | None, ports=(8000, 8001)) -> config.Config:
    up = tmp_path / "upstream.conf"
    if upstream is not None:
        up.write_text(upstream)
    instances = ", ".join(f"{{port: {p}}}" for p in ports)
    text = (
        f"instances: [{instances}]\ngateway: {{upstream_file: {up}}}\nmodel: {{path: {tmp_path / 'model'}}}\n"
        f"paths: {{state_dir: {tmp_path / 'state'}, cache_dir: {tmp_path / 'cache'}}}\n"
    )
    return config.parse(text)


# -- route -------------------------------------------------------------------------------------
def test_route_reads_the_include_and_names_the_spare(tmp_path):
    r = apply.route(_cfg(tmp_path, "server 127.0.0.1:8001 max_fails=0;\n"))
    assert (r.routed_port, r.spare_port, r.initial) == (8001, 8000, False)


def test_route_on_a_fresh_host_is_the_initial_port(tmp_path):
    cfg = _cfg(tmp_path, None)
    assert (apply.route(cfg).routed_port, apply.route(cfg).initial) == (8000, True)
    assert apply.route(cfg, initial=8001).routed_port == 8001
    with pytest.raises(UsageError, match="not an instance"):
        apply.route(cfg, initial=9000)


def test_route_init_writes_only_on_a_fresh_host(tmp_path):
    cfg = _cfg(tmp_path, None)
    assert apply.init_route(cfg, 8001, check=True).changed and not (tmp_path / "upstream.conf").exists()
    r = apply.init_route(cfg, 8001)
    assert r.changed and apply.route(cfg).routed_port == 8001 and not apply.route(cfg).initial
    again = apply.init_route(cfg, 8000)  # an existing route wins over the initial port
    assert not again.changed and again.routed_port == 8001


def test_route_init_gives_a_host_from_before_the_keyed_twin_the_twin_of_its_route(tmp_path):
    """An upgraded host has upstream.conf (a cutover left it on 8001) and no upstream-keyed.conf, which the new
    ernie-ops.conf includes: route --init writes the twin of the route it has (never the initial port), once."""
    cfg = _cfg(tmp_path, "server 127.0.0.1:8001 max_fails=0;\n")
    twin = tmp_path / "upstream-keyed.conf"
    assert apply.init_route(cfg, 8000, check=True).changed and not twin.exists()
    r = apply.init_route(cfg, 8000)
    assert r.changed and r.routed_port == 8001 and gateway.parse_ports(twin.read_text()) == [8001]
    assert (tmp_path / "upstream.conf").read_text() == "server 127.0.0.1:8001 max_fails=0;\n"  # the route itself untouched
    assert not apply.init_route(cfg, 8000).changed
    twin.write_text("server 127.0.0.1:8000;\n")  # out of step (edited by hand): put back in step
    assert apply.init_route(cfg, 8000).changed and gateway.parse_ports(twin.read_text()) == [8001]


def test_route_refuses_an_include_naming_a_port_the_config_does_not_list(tmp_path):
    with pytest.raises(UsageError, match="9000 is not an instance"):
        apply.route(_cfg(tmp_path, "server 127.0.0.1:9000;\n"))
    with pytest.raises(GatewayError, match=r"splits traffic .*cutover --abort"):
        apply.route(_cfg(tmp_path, "server 127.0.0.1:8000;\nserver 127.0.0.1:8001;\n"))


# -- when did an input change ------------------------------------------------------------------
def test_path_time_follows_symlink_switches_not_directory_times(tmp_path):
    v1, v2 = tmp_path / "models" / "v1", tmp_path / "models" / "v2"
    v1.mkdir(parents=True)
    (v1 / "config.json").write_text("{}")
    os.utime(v1 / "config.json", (1000, 1000))
    current = tmp_path / "models" / "current"
    current.symlink_to("v1")
    os.utime(current, (2000, 2000), follow_symlinks=False)
    assert apply.path_time(current) == 2000
    assert apply.path_time(current / "config.json") == 2000  # the link is on its way
    v2.mkdir()  # staging a new version beside it touches the parent directory only
    assert apply.path_time(current) == 2000
    tmp = tmp_path / "models" / ".current-new"
    tmp.symlink_to("v2")
    tmp.rename(current)  # the role's atomic switch
    assert apply.path_time(current) > 2000
    assert apply.path_time(tmp_path / "missing") is None


def test_path_time_of_a_rewritten_file_and_absolute_links(tmp_path):
    f = tmp_path / "ernie.yaml"
    f.write_text("a: 1\n")
    os.utime(f, (1000, 1000))
    link = tmp_path / "venv"
    link.symlink_to(tmp_path)  # absolute target
    os.utime(link, (500, 500), follow_symlinks=False)
    assert apply.path_time(link / "ernie.yaml") == 1000
    f.write_text("a: 2\n")
    assert apply.path_time(link / "ernie.yaml") > 1000
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert apply.path_time(loop) is None


def test_unit_inputs_come_from_systemds_view_of_the_unit(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "ernie_ops"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    props = {
        "FragmentPath": "/etc/systemd/system/ernie-vllm@.service",
        "DropInPaths": "/etc/systemd/system/ernie-vllm@.service.d/a.conf /run/b.conf",
        "EnvironmentFiles": "/etc/ernie-ops/ernie.env (ignore_errors=yes)",
        "ExecStart": f"{{ path={tmp_path}/venv/bin/python ; argv[]={tmp_path}/venv/bin/python -m ernie_ops serve 8000 ; ... }}",
    }
    assert apply.unit_inputs(props, ["/etc/ernie-ops/ernie.yaml"]) == [
        "/etc/systemd/system/ernie-vllm@.service", "/etc/systemd/system/ernie-vllm@.service.d/a.conf", "/run/b.conf",
        "/etc/ernie-ops/ernie.env", f"{tmp_path}/venv/bin/python", str(site / "__init__.py"), "/etc/ernie-ops/ernie.yaml",
    ]  # fmt: skip


# -- decisions against a recording host -------------------------------------------------------------
class FakeHost:
    """apply's `Host`: systemd and the cutover recorded in `calls`; file times from a dict; the clock fixed at
    wall 10_000 / monotonic 500. `units[unit]["started"]` is seconds before now. `fail_verb` makes that
    systemctl verb raise (`fail_with`, or a SystemdError); `cutover_ok=False` makes the cutover roll back."""

    def __init__(self, units: dict[str, dict], times: dict[str, float], cutover_ok: bool = True, fail_verb: str | None = None,
                 fail_with: Exception | None = None):  # fmt: skip
        self.units, self.times, self.calls = units, times, []
        self.cutover_ok, self.fail_verb, self.fail_with = cutover_ok, fail_verb, fail_with

    def props(self, unit: str) -> dict[str, str]:
        u = self.units.get(unit, {"active": "inactive"})
        started_mono = 500.0 - u["started"] if "started" in u else 0
        return {
            "ActiveState": u["active"], "UnitFileState": u.get("enabled", "enabled"),
            "ExecMainStartTimestampMonotonic": str(int(started_mono * 1e6)), "FragmentPath": f"/units/{unit}",
        }  # fmt: skip

    def path_time(self, path: str) -> float | None:
        return self.times.get(path)

    def now(self) -> tuple[float, float]:
        return 10_000.0, 500.0

    def systemctl(self, verb: str, unit: str, timeout: float) -> None:
        self.calls.append(f"{verb} {unit}")
        if verb == self.fail_verb:
            raise self.fail_with or systemd.SystemdError(f"systemctl {verb} {unit} failed: Job failed")

    def run_cutover(self, cfg, target: int, start_timeout: float) -> dict:
        self.calls.append(f"cutover {target}")
        return {
            "ok": self.cutover_ok,
            "outcome": "switched" if self.cutover_ok else "rolled-back",
            "error": None if self.cutover_ok else "gate",
        }

    upstream = ""  # the include a pool's apply reads and writes

    def upstream_text(self, cfg) -> str:
        return self.upstream

    pool_result: dict | None = None  # what the pool upgrade reports (None: done, replicas unchanged)

    def run_pool_upgrade(self, cfg, replicas: list[int], stale: list[int], extra: list[str], start_timeout: float) -> dict:
        self.calls.append(f"pool upgrade {','.join(map(str, stale))}")
        return self.pool_result or {"ok": True, "replicas": replicas, "down": [], "error": None}

    def route_pool(self, cfg, ports: list[int]) -> None:
        self.calls.append(f"route pool {','.join(map(str, ports))}")
        if self.fail_verb == "route":
            raise GatewayError("nginx -t failed: unknown directive")
        self.upstream = gateway.render_pool(ports, cfg.pool.balance)


ENGINE, SPARE, CHAT = "ernie-vllm@8000.service", "ernie-vllm@8001.service", apply.CHAT_UNIT
CONF = "/etc/ernie-ops/ernie.yaml"
# wall clock "now" is 10_000: a unit started 100 s ago started at 9_900


@pytest.mark.parametrize(
    ("units", "times", "mode", "expected_calls", "actions"),
    [
        # nothing runs (fresh host): start and enable, the chat app too
        ({}, {}, "cutover", [f"enable {ENGINE}", f"start {ENGINE}", f"enable {CHAT}", f"start {CHAT}"], ["start", "start"]),
        # both run, started after every input: nothing at all (the changed=0 rerun)
        ({ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}},
         {CONF: 9_000.0}, "cutover", [], ["none", "none"]),
        # the config changed after both started: cut over to the spare, restart the chat app
        ({ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}},
         {CONF: 9_990.0}, "cutover", ["cutover 8001", f"restart {CHAT}"], ["cutover", "restart"]),
        # mode restart / none
        ({ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}},
         {CONF: 9_990.0}, "restart", [f"restart {ENGINE}", f"restart {CHAT}"], ["restart", "restart"]),
        ({ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}},
         {CONF: 9_990.0}, "none", [f"restart {CHAT}"], ["pending", "restart"]),
        # the model link switched after the engine started: only the engine moves
        ({ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}},
         {"MODEL": 9_990.0, CONF: 9_000.0}, "cutover", ["cutover 8001"], ["cutover", "none"]),
        # a stale spare left running is stopped first: a cutover would adopt it with the old inputs
        ({ENGINE: {"active": "active", "started": 100}, SPARE: {"active": "active", "started": 200},
          CHAT: {"active": "active", "started": 5}},
         {CONF: 9_990.0}, "cutover", [f"stop {SPARE}", "cutover 8001"], ["cutover", "none"]),
        # serving but not enabled at boot: enable only
        ({ENGINE: {"active": "active", "started": 100, "enabled": "disabled"}, CHAT: {"active": "active", "started": 5}},
         {}, "cutover", [f"enable {ENGINE}"], ["enable", "none"]),
        # a unit still starting is left alone
        ({ENGINE: {"active": "activating", "started": 10}, CHAT: {"active": "active", "started": 5}},
         {CONF: 9_990.0}, "cutover", [], ["none", "none"]),
    ],
)  # fmt: skip
def test_apply_decides_from_what_runs_and_what_changed(tmp_path, units, times, mode, expected_calls, actions):
    cfg = _cfg(tmp_path, "server 127.0.0.1:8000 max_fails=0;\n")
    times = {(cfg.model.path if k == "MODEL" else k): v for k, v in times.items()}
    host = FakeHost(units, times)
    res = apply.apply(cfg, CONF, mode=mode, host=host)
    assert [a.action for a in res.actions] == actions
    assert host.calls == expected_calls
    assert res.ok and res.changed == any(a not in ("none", "pending") for a in actions)
    # --check decides the same and does nothing
    checked = apply.apply(cfg, CONF, mode=mode, check=True, host=(h := FakeHost(units, times)))
    assert [a.action for a in checked.actions] == actions and h.calls == []


def test_apply_names_the_inputs_that_changed(tmp_path):
    cfg = _cfg(tmp_path, "server 127.0.0.1:8001;\n")
    host = FakeHost(
        {"ernie-vllm@8001.service": {"active": "active", "started": 100}}, {CONF: 9_990.0, "/units/ernie-vllm@8001.service": 9_950.0}
    )
    a = apply.apply(cfg, CONF, services=("engine",), host=host).actions[0]
    assert (a.action, a.target, a.newer) == ("cutover", "8000", ["/units/ernie-vllm@8001.service", CONF])
    assert host.calls == ["cutover 8000"]


def test_apply_reports_failures_without_raising(tmp_path):
    cfg = _cfg(tmp_path, "server 127.0.0.1:8000;\n")
    stale = {ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}}
    res = apply.apply(cfg, CONF, host=FakeHost(stale, {CONF: 9_990.0}, cutover_ok=False))
    assert not res.ok and "cutover to 8001 rolled-back: gate" in res.actions[0].error
    assert res.actions[1].done  # the chat app is still handled
    res = apply.apply(cfg, CONF, services=("chat",), host=FakeHost({}, {}, fail_verb="start"))
    assert not res.ok and "Job failed" in res.actions[0].error


LAUNCHER_REASON = "engine exited with code 1 while loading; its last error: ValidationError: max_model_len (8192) is too long"


def test_a_start_that_fails_ends_apply_with_the_launchers_reason_and_the_journal_command(tmp_path):
    """What the ernie_ops role shows (apply --json's `message`) when the routed instance does not start on a fresh host."""
    cfg = _cfg(tmp_path, None)
    host = FakeHost({}, {}, fail_verb="start", fail_with=systemd.StartFailed(ENGINE, LAUNCHER_REASON))
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert not res.ok and host.calls == [f"enable {ENGINE}", f"start {ENGINE}"]
    expected = f"{ENGINE} did not start: {LAUNCHER_REASON}\nIts journal: journalctl -u ernie-vllm@8000 -n 100"
    assert res.message == expected
    assert json.loads(json.dumps(res.as_dict()))["message"] == expected
    assert apply.apply(cfg, CONF, services=("engine",), check=True, host=FakeHost({}, {})).as_dict()["message"] is None


def test_a_cutover_whose_new_instance_does_not_start_says_why_and_where_traffic_is(tmp_path):
    """apply -> the real cutover runbook -> its start step (hostops: systemd.start, here a fake host raising what
    systemd.run_verb raises): the message names the launcher's reason, the journal command and the serving instance."""

    class NoStart(runbook_host.FakeHost):
        def start(self, port: int, timeout: float) -> None:
            self._call("start", port)
            raise systemd.StartFailed(systemd.unit_name(port), LAUNCHER_REASON)

    class RealRunbook(FakeHost):
        def run_cutover(self, cfg, target: int, start_timeout: float) -> dict:
            return cutover.Cutover(cfg, target, host=fake).run().as_dict()

    cfg = _cfg(tmp_path, "server 127.0.0.1:8000;\n")
    fake = NoStart()
    host = RealRunbook({ENGINE: {"active": "active", "started": 100}}, {CONF: 9_990.0})
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.message == (
        f"cutover to 8001 aborted (the old instance 8000 keeps serving): {SPARE} did not start: {LAUNCHER_REASON}\n"
        "Its journal: journalctl -u ernie-vllm@8001 -n 100"
    )
    assert fake.units == {8000: "active", 8001: "inactive"}  # the runbook stopped what did not start


def test_an_apply_driven_cutover_runs_the_quality_gate(tmp_path):
    """apply -> the real cutover runbook with cutover.eval set (the shipped smoke set) -> its quality step (the fake
    host's scripted reports): a new instance that fails the set is refused, and the message says where traffic is."""

    class RealRunbook(FakeHost):
        def run_cutover(self, cfg, target: int, start_timeout: float) -> dict:
            return cutover.Cutover(cfg, target, host=fake).run().as_dict()

    smoke = Path(config.__file__).parent / "data" / "eval" / "smoke.yaml"
    base = _cfg(tmp_path, "server 127.0.0.1:8000;\n")
    cfg = base.model_copy(update={"cutover": base.cutover.model_copy(update={"eval": config.EvalGateConfig(file=str(smoke))})})
    fake = runbook_host.FakeHost(evals={8001: [("capital-france", False)], 8000: [("capital-france", True)]})
    host = RealRunbook({ENGINE: {"active": "active", "started": 100}}, {CONF: 9_990.0})
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.message == (
        "cutover to 8001 aborted (the old instance 8000 keeps serving): quality: 8001 passed 0 of 1 case (0%, needs 100%; "
        "8000 passed 1 of 1 (100%)): failing capital-france (missing 'answer-capital-france')"
    )
    assert fake.units == {8000: "active", 8001: "inactive"} and fake.file_port == 8000  # never switched


def test_apply_without_start_leaves_a_stopped_unit_alone(tmp_path):
    cfg = _cfg(tmp_path, None)
    host = FakeHost({}, {})
    res = apply.apply(cfg, CONF, start=False, host=host)
    assert [a.action for a in res.actions] == ["none", "none"] and host.calls == [] and not res.changed


def test_apply_rejects_an_unknown_mode(tmp_path):
    with pytest.raises(UsageError, match="mode 'sideways'"):
        apply.apply(_cfg(tmp_path, None), CONF, mode="sideways", host=FakeHost({}, {}))


def test_start_time_is_read_from_systemds_monotonic_stamp():
    host = FakeHost({ENGINE: {"active": "active", "started": 100}}, {"/a": 9_899.0, "/b": 9_901.0})
    seen = apply.look(host, ENGINE, ["/a", "/b"])
    assert seen.started_at == pytest.approx(9_900.0) and seen.newer == ["/b"]


def test_a_config_change_outside_what_a_service_reads_moves_nothing(tmp_path):
    """The file is newer than both processes; a recorded digest per process says which part changed."""
    conf = tmp_path / "ernie.yaml"
    base = _cfg(tmp_path, "server 127.0.0.1:8000;\n")
    running = {ENGINE: {"active": "active", "started": 100}, CHAT: {"active": "active", "started": 50}}
    host = FakeHost(running, {str(conf): 9_000.0})  # written before both started
    first = apply.apply(base, str(conf), host=host)
    assert [a.action for a in first.actions] == ["none", "none"] and not first.warnings
    recorded = json.loads((tmp_path / "state" / "applied.json").read_text())
    assert set(recorded) == {ENGINE, CHAT}

    def changed(**section) -> config.Config:
        return base.model_copy(update={k: getattr(base, k).model_copy(update=v) for k, v in section.items()})

    host.times[str(conf)] = 9_990.0  # rewritten after both started
    chat_only = apply.apply(changed(chat={"app_name": "Support"}), str(conf), host=(h := FakeHost(running, host.times)))
    assert [a.action for a in chat_only.actions] == ["none", "restart"] and h.calls == [f"restart {CHAT}"]
    assert chat_only.actions[0].reason == f"{ENGINE} serves; {conf} changed only in what it does not read"
    # the CLI's own sections: read by the next cutover, never a reason to move an engine or the chat app
    plan_only = apply.apply(changed(cutover={"bake_seconds": 600}, gateway={"access_log": None}), str(conf),
                            host=(h := FakeHost(running, host.times)))  # fmt: skip
    assert [a.action for a in plan_only.actions] == ["none", "none"] and h.calls == [], plan_only
    engine_only = apply.apply(changed(vllm={"max_num_seqs": 8}), str(conf), host=(h := FakeHost(running, host.times)))
    assert [a.action for a in engine_only.actions] == ["cutover", "none"] and h.calls == ["cutover 8001"]
    # a record of another process (restarted by hand since) does not count: the file time decides
    other = {ENGINE: {"active": "active", "started": 20}, CHAT: {"active": "active", "started": 50}}
    res = apply.apply(base, str(conf), host=(h := FakeHost(other, host.times)))
    assert [a.action for a in res.actions] == ["cutover", "none"] and h.calls == ["cutover 8001"]


# -- a pool (pool.replicas > 1) ------------------------------------------------------------------
def _pool_cfg(tmp_path: Path, upstream: str | None) -> config.Config:
    up = tmp_path / "upstream.conf"
    if upstream is not None:
        up.write_text(upstream)
    instances = "".join(f"  - {{port: {8000 + 2 * k}, slot: {k}}}\n  - {{port: {8001 + 2 * k}, slot: {k}}}\n" for k in range(2))
    text = (
        f"pool: {{replicas: 2}}\ninstances:\n{instances}gateway: {{upstream_file: {up}}}\nmodel: {{path: {tmp_path / 'model'}}}\n"
        f"paths: {{state_dir: {tmp_path / 'state'}, cache_dir: {tmp_path / 'cache'}}}\n"
    )
    return config.parse(text)


def test_a_pools_route_is_a_replica_per_slot_from_the_include_else_the_slots_first_ports(tmp_path):
    fresh = apply.route(_pool_cfg(tmp_path, None))
    assert (fresh.replicas, fresh.initial, fresh.spare_port) == ([8000, 8002], True, None)
    # slot 1 serves from its surge port (a replaced replica); a watch's `down` mark keeps it the slot's replica
    r = apply.route(_pool_cfg(tmp_path, "server 127.0.0.1:8000 max_fails=1;\nserver 127.0.0.1:8003 max_fails=1 down;\n"))
    assert (r.replicas, r.initial) == ([8000, 8003], False)
    grown = apply.route(_pool_cfg(tmp_path, "server 127.0.0.1:8001 max_fails=0;\n"))  # a one-replica host grown to two
    assert (grown.replicas, grown.initial) == ([8001, 8002], False)
    with pytest.raises(GatewayError, match=r"routes 8002 and 8003 of slot 1 \(the host's default device\) at once"):
        apply.route(_pool_cfg(tmp_path, "server 127.0.0.1:8002;\nserver 127.0.0.1:8003;\n"))
    with pytest.raises(UsageError, match="9000 is not an instance"):
        apply.route(_pool_cfg(tmp_path, "server 127.0.0.1:9000;\n"))


def test_route_init_of_a_fresh_pool_writes_every_replica_balanced_and_its_keyed_twin(tmp_path):
    cfg = _pool_cfg(tmp_path, None)
    r = apply.init_route(cfg)
    text = (tmp_path / "upstream.conf").read_text()
    assert r.changed and gateway.parse_ports(text) == [8000, 8002] and "least_conn;" in text
    assert "hash $ernie_session_key consistent;" in (tmp_path / "upstream-keyed.conf").read_text()
    assert not apply.init_route(cfg).changed  # an existing route wins, as on one instance


POOL = [f"ernie-vllm@{p}.service" for p in (8000, 8002)]


def test_apply_on_a_fresh_pool_starts_every_replica_and_leaves_the_include_it_has(tmp_path):
    cfg = _pool_cfg(tmp_path, None)
    apply.init_route(cfg)
    host = FakeHost({}, {})
    host.upstream = (tmp_path / "upstream.conf").read_text()
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.ok and [a.action for a in res.actions] == ["start", "start"]
    assert host.calls == [f"enable {POOL[0]}", f"start {POOL[0]}", f"enable {POOL[1]}", f"start {POOL[1]}"]
    assert res.route["replicas"] == [8000, 8002]


def test_apply_on_a_host_grown_to_a_pool_routes_the_new_replica_once_it_serves(tmp_path):
    cfg = _pool_cfg(tmp_path, "server 127.0.0.1:8000 max_fails=0;\n")
    host = FakeHost({POOL[0]: {"active": "active", "started": 100}}, {CONF: 9_000.0})
    host.upstream = "server 127.0.0.1:8000 max_fails=0;\n"
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.ok and [a.action for a in res.actions] == ["none", "start", "route"]
    assert host.calls == [f"enable {POOL[1]}", f"start {POOL[1]}", "route pool 8000,8002"]
    # the next run finds nothing to do
    host.units[POOL[1]] = {"active": "active", "started": 10}
    host.calls.clear()
    again = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert [a.action for a in again.actions] == ["none", "none"] and host.calls == [] and not again.changed


def test_a_pool_replica_that_cannot_start_is_not_routed_and_the_error_names_it(tmp_path):
    cfg = _pool_cfg(tmp_path, "server 127.0.0.1:8000 max_fails=0;\n")
    failed = systemd.StartFailed(POOL[1], "engine exited with code 1 while loading")
    host = FakeHost({POOL[0]: {"active": "active", "started": 100}}, {CONF: 9_000.0}, fail_verb="start", fail_with=failed)
    host.upstream = "server 127.0.0.1:8000 max_fails=0;\n"
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert not res.ok and "ernie-vllm@8002.service did not start: engine exited with code 1" in res.message
    assert "route pool" not in " ".join(host.calls)  # the serving replica keeps all the traffic


def test_a_pool_include_nginx_refuses_fails_the_run_and_the_serving_replica_keeps_the_traffic(tmp_path):
    cfg = _pool_cfg(tmp_path, "server 127.0.0.1:8000 max_fails=0;\n")
    host = FakeHost({POOL[0]: {"active": "active", "started": 100}}, {CONF: 9_000.0}, fail_verb="route")
    host.upstream = "server 127.0.0.1:8000 max_fails=0;\n"
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert not res.ok and res.actions[-1].action == "route", res.actions
    assert "replica(s) 8002 serve but the gateway still routes only the others: nginx -t failed" in res.message


def test_changed_pool_replicas_are_replaced_by_one_pool_upgrade_or_left_pending_in_mode_none(tmp_path):
    cfg = _pool_cfg(tmp_path, None)
    apply.init_route(cfg)
    units = {POOL[0]: {"active": "active", "started": 100}, POOL[1]: {"active": "active", "started": 5}}
    host = FakeHost(units, {CONF: 9_990.0})  # the config changed after 8000 started, before 8002 did
    host.upstream = (tmp_path / "upstream.conf").read_text()
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.ok and [a.action for a in res.actions] == ["upgrade", "none"] and host.calls == ["pool upgrade 8000"]
    assert res.actions[0].done and res.changed
    # a surge moved slot 0 to its second port: the route says so
    host.calls.clear()
    host.pool_result = {"ok": True, "replicas": [8001, 8002], "down": [], "error": None}
    moved = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert moved.route["replicas"] == [8001, 8002]
    pending = apply.apply(cfg, CONF, services=("engine",), host=host, mode="none")
    assert [a.action for a in pending.actions] == ["pending", "none"] and "run `ernie-ops apply`" in pending.actions[0].reason


def test_a_failed_pool_upgrade_fails_the_run_with_its_sentence(tmp_path):
    cfg = _pool_cfg(tmp_path, None)
    apply.init_route(cfg)
    host = FakeHost({u: {"active": "active", "started": 100} for u in POOL}, {CONF: 9_990.0})
    host.upstream = (tmp_path / "upstream.conf").read_text()
    host.pool_result = {"ok": False, "replicas": [8000, 8002], "down": [8000], "error": "slot 0 (cores 0): 8000 stays out of rotation"}
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert not res.ok and res.message == "pool upgrade: slot 0 (cores 0): 8000 stays out of rotation"
    assert host.calls == ["pool upgrade 8000,8002"]


def test_a_cutover_on_a_pool_host_is_a_usage_error_that_says_what_replaces_replicas(tmp_path, capsys):
    from ernie_ops import cli
    from ernie_ops.errors import EXIT_USAGE

    cfg = tmp_path / "ernie.yaml"
    cfg.write_text("pool: {replicas: 2}\ninstances:\n  - {port: 8000, slot: 0}\n  - {port: 8002, slot: 1}\n")
    for argv in (["cutover", "8002"], ["rollback"]):
        assert cli.main(["--config", str(cfg), *argv]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "serves a pool of 2 replicas" in err and "`ernie-ops apply`" in err and "Traceback" not in err, err


def test_routing_a_new_replica_after_a_surge_keeps_the_slot_the_surge_moved(tmp_path):
    """A host grown to a pool while its first replica's inputs changed: slot 1 starts, slot 0 is upgraded by a surge
    to 8001; the include then gets both as the upgrade left them, never the replaced 8000 back."""
    cfg = _pool_cfg(tmp_path, "server 127.0.0.1:8000 max_fails=0;\n")
    host = FakeHost({POOL[0]: {"active": "active", "started": 100}}, {CONF: 9_990.0})
    host.upstream = "server 127.0.0.1:8000 max_fails=0;\n"
    host.pool_result = {"ok": True, "replicas": [8001, 8002], "down": [], "error": None}
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.ok and host.calls == [f"enable {POOL[1]}", f"start {POOL[1]}", "pool upgrade 8000", "route pool 8001,8002"]
    assert res.route["replicas"] == [8001, 8002]


def test_a_replica_an_upgrade_held_out_is_replaced_again_by_the_next_apply_though_nothing_changed(tmp_path):
    cfg = _pool_cfg(tmp_path, None)
    host = FakeHost({u: {"active": "active", "started": 5} for u in POOL}, {CONF: 9_990.0})  # both on the new inputs
    host.upstream = gateway.render_pool([8000, 8002], held={8000: "8000 failed the SLO gate: ttft p90 0.4 s"})
    res = apply.apply(cfg, CONF, services=("engine",), host=host)
    assert res.ok and [a.action for a in res.actions] == ["upgrade", "none"] and host.calls == ["pool upgrade 8000"]
    assert res.actions[0].reason == "held out of rotation by an upgrade: 8000 failed the SLO gate: ttft p90 0.4 s"
    pending = apply.apply(cfg, CONF, services=("engine",), host=host, mode="none")
    assert [a.action for a in pending.actions] == ["pending", "none"]
