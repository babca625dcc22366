"""Pure pieces of the cutover: upstream file, memory budget, metrics parsing, lock, history, bench stats."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import UsageError
from ernie_ops.host import state
from ernie_ops.observe import bench
from ernie_ops.stats import metrics
from ernie_ops.traffic import cutover, gateway, hostops

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="ernie-tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="ernie-tiny"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="ernie-tiny"} 0.25
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="ernie-tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="ernie-tiny"} 3.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="ernie-tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="ernie-tiny"} 50.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="ernie-tiny"} 99.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="ernie-tiny"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="ernie-tiny"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="ernie-tiny"} 2.0
"""


def test_metrics_snapshot_from_vllm_text():
    snap = metrics.parse(METRICS)
    assert (snap.running, snap.waiting, snap.in_flight) == (3.0, 2.0, 5.0)
    assert snap.kv_cache_usage == 0.25 and snap.requests_ok == 10.0
    assert snap.ttft_p50 == pytest.approx(0.02)  # rank 50 falls exactly on the 0.02 bucket
    assert snap.ttft_p99 == pytest.approx(0.04)
    assert metrics.parse("").ttft_p50 is None


def test_upstream_render_and_parse_roundtrip():
    text = gateway.render_upstream(8001, previous=8000)
    assert gateway.parse_ports(text) == [8001]
    assert "previous: 8000" in text
    assert gateway.parse_ports("server 127.0.0.1:8000 backup;\nserver 127.0.0.1:8001;\n# server 127.0.0.1:9;\n") == [8001]


def test_a_pool_renders_every_replica_in_rotation_and_a_down_one_stays_listed_out_of_it():
    """Pool step 2 (docs/design/replica-pool.md): the includes ernie-ops will write for a pool."""
    text = gateway.render_pool([8002, 8000, 8004, 8006], down=frozenset({8004}))
    assert "least_conn;\n" in text and "zone ernie_vllm 256k;\n" in text and "hash" not in text
    assert gateway.parse_ports(text) == [8000, 8002, 8006]  # in rotation: the down one is not
    assert "server 127.0.0.1:8004 max_fails=1 fail_timeout=5s down;" in text
    keyed = gateway.render_keyed(text)  # the twin: same servers, marks kept, chosen by the session key
    assert "hash $ernie_session_key consistent;\n" in keyed and "zone ernie_vllm_keyed 256k;" in keyed and "least_conn" not in keyed
    assert gateway.parse_ports(keyed) == [8000, 8002, 8006] and "8004 max_fails=1 fail_timeout=5s down;" in keyed
    unkeyed = gateway.render_keyed(text, session_affinity=False)  # affinity off: balanced as the unkeyed group is
    assert "least_conn;\n" in unkeyed and "hash" not in unkeyed and "zone ernie_vllm_keyed 256k;" in unkeyed
    split = gateway.render_split(8000, 8001, 25, "api_key")  # a canary step: a conversation stays on one side
    assert gateway.parse_weights(gateway.render_keyed(split)) == {8000: 75, 8001: 25}
    assert gateway.render_keyed(split).count("hash ") == 1 and "$ernie_sticky_key" not in gateway.render_keyed(split)
    assert "$ernie_sticky_key" in gateway.render_keyed(split, session_affinity=False)
    assert "least_conn" not in gateway.render_pool([8000, 8002], balance="round_robin")
    with pytest.raises(ValueError, match="'random' is not least_conn or round_robin"):
        gateway.render_pool([8000], balance="random")
    with pytest.raises(ValueError, match="at least one port"):
        gateway.render_pool([])


def test_upstream_write_is_atomic_and_keeps_mode(tmp_path):
    f = tmp_path / "upstream.conf"
    f.write_text("server 127.0.0.1:8000;\n")
    f.chmod(0o640)
    gw = gateway.Gateway(config.GatewayConfig(upstream_file=str(f)))
    gw.write_upstream(gateway.render_upstream(8001))
    assert gw.active_port() == 8001
    assert f.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream-keyed.conf", "upstream.conf"]  # no temp file left
    assert gw.keyed_in_step() and gateway.parse_ports((tmp_path / "upstream-keyed.conf").read_text()) == [8001]


def test_missing_upstream_and_several_ports_are_clear_errors(tmp_path):
    gw = gateway.Gateway(config.GatewayConfig(upstream_file=str(tmp_path / "nope.conf")))
    with pytest.raises(gateway.GatewayError, match="does not exist"):
        gw.active_port()
    (tmp_path / "two.conf").write_text("server 127.0.0.1:8000;\nserver 127.0.0.1:8001;\n")
    gw = gateway.Gateway(config.GatewayConfig(upstream_file=str(tmp_path / "two.conf")))
    with pytest.raises(gateway.GatewayError, match=r"splits traffic .*cutover --abort"):
        gw.active_port()


def test_routing_a_pool_keeps_the_watchs_marks_and_nginx_refusing_it_leaves_the_include_as_it_was(tmp_path):
    """Gateway.route_pool (apply on a host grown to a pool). nginx is a STUB here (a script answering -t and -s reload:
    the real one proves the reload in tests/integration/test_gateway.py); `nginx -t` failing is what it injects."""
    stub = tmp_path / "nginx"
    stub.write_text('#!/bin/sh\n[ -e "$(dirname "$0")/refuse" ] && [ "$1" = -t ] && { echo "unknown directive" >&2; exit 1; }\nexit 0\n')
    stub.chmod(0o755)
    up = tmp_path / "upstream.conf"
    gw = gateway.Gateway(config.GatewayConfig(upstream_file=str(up), nginx_binary=str(stub)))
    gw.route_pool([8000, 8002])  # a fresh host: the first include
    assert gateway.parse_ports(up.read_text()) == [8000, 8002] and gw.keyed_in_step()
    gw.mark_down(frozenset({8002}))  # the watch took 8002 out
    gw.route_pool([8000, 8002, 8004])
    assert gateway.marks_of(up.read_text()) == {8000: False, 8002: True, 8004: False}
    before = up.read_text()
    (tmp_path / "refuse").touch()
    with pytest.raises(gateway.GatewayError, match="nginx -t failed: unknown directive"):
        gw.route_pool([8000])
    assert up.read_text() == before and gw.keyed_in_step()
    fresh = gateway.Gateway(config.GatewayConfig(upstream_file=str(tmp_path / "new" / "upstream.conf"), nginx_binary=str(stub)))
    (tmp_path / "new").mkdir()
    with pytest.raises(gateway.GatewayError):
        fresh.route_pool([8000])
    assert list((tmp_path / "new").iterdir()) == []  # a refused first include is not left behind


def test_missing_nginx_binary_is_a_clear_error(tmp_path):
    gw = gateway.Gateway(config.GatewayConfig(nginx_binary=str(tmp_path / "nginx")))
    with pytest.raises(gateway.GatewayError, match="not found"):
        gw.test()


def test_two_instances_at_092_on_one_gpu_are_refused_with_numbers_and_a_fix():
    cfg = config.parse(
        "vllm:\n  accelerator: gpu\n  gpu_memory_utilization: 0.92\ninstances:\n  - port: 8000\n    gpu: 0\n  - port: 8001\n    gpu: 0\n"
    )
    problem = hostops.memory_budget_problem(cfg, 8000, 8001)
    assert "1.84" in problem and "gpu_memory_utilization <= 0.47" in problem and "another GPU" in problem
    other = config.parse(
        "vllm:\n  accelerator: gpu\n  gpu_memory_utilization: 0.92\ninstances:\n  - port: 8000\n    gpu: 0\n  - port: 8001\n    gpu: 1\n"
    )
    assert hostops.memory_budget_problem(other, 8000, 8001) is None
    small = config.parse("vllm:\n  accelerator: gpu\n  gpu_memory_utilization: 0.45\n")
    assert hostops.memory_budget_problem(small, 8000, 8001) is None
    assert hostops.memory_budget_problem(cfg, None, 8001) is None  # nothing running: nothing to share


def test_cpu_budget_reads_available_memory(tmp_path):
    cfg = config.parse("vllm:\n  accelerator: cpu\n  cpu_kvcache_space_gib: 4\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 25000000 kB\nMemAvailable: 3000000 kB\n")
    assert "2.9 GiB" in hostops.memory_budget_problem(cfg, 8000, 8001, meminfo)
    meminfo.write_text("MemAvailable: 20000000 kB\n")
    assert hostops.memory_budget_problem(cfg, 8000, 8001, meminfo) is None


def _hold_lock(state_dir: str, ready) -> None:
    with state.cutover_lock(Path(state_dir), "cutover to 8001"):
        ready.set()
        time.sleep(60)


def test_lock_refuses_a_second_cutover_and_dies_with_its_holder(tmp_path):
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(state.LockHeld, match=rf"pid {holder.pid}, cutover to 8001"), state.cutover_lock(tmp_path, "cutover to 8000"):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # a killed cutover must not leave a stale lock
        holder.join()
    with state.cutover_lock(tmp_path, "cutover to 8000"):
        pass


def test_history_is_appended_and_bounded(tmp_path):
    for i in range(state.HISTORY_LIMIT + 5):
        state.record(tmp_path, {"target": i}, active_port=8001, previous_port=8000)
    st = state.load(tmp_path)
    assert len(st.history) == state.HISTORY_LIMIT and st.history[-1]["target"] == state.HISTORY_LIMIT + 4
    assert (st.active_port, st.previous_port) == (8001, 8000)
    (tmp_path / "state.json").write_text("{broken")
    assert state.load(tmp_path).history == []


def test_cutover_to_a_port_not_in_the_config_is_a_usage_error(tmp_path):
    cfg = config.parse(f"paths:\n  state_dir: {tmp_path}\n")
    with pytest.raises(UsageError, match="port 9999 is not an instance"):
        cutover.Cutover(cfg, 9999).run()


def test_bench_summary_counts_retries_cuts_and_port_mix():
    recs = [
        bench.Record(ok=True, start=0, ttft=0.01, e2e=0.1, tokens=8, upstream="127.0.0.1:8000"),
        bench.Record(ok=True, start=0, ttft=0.03, e2e=0.3, tokens=8, upstream="127.0.0.1:8001", retried=True),
        bench.Record(ok=False, start=0, ttft=0.02, tokens=3, cut=True, error="cut: ReadError"),
    ]
    r = bench.summarize(recs, seconds=2.0)
    assert (r.requests, r.ok, r.failed, r.cut, r.retried) == (3, 2, 1, 1, 1)
    assert r.qps == 1.0 and r.output_tokens_per_s == 8.0
    assert r.upstreams == {"127.0.0.1:8000": 1, "127.0.0.1:8001": 1}
    assert r.ttft_p50 in (0.01, 0.03) and r.errors == {"cut: ReadError": 1}


DEBIAN_DUMP = """\
# configuration file /etc/nginx/nginx.conf:
user www-data;
worker_processes auto;
pid /run/nginx.pid;
include /etc/nginx/modules-enabled/*.conf;
# configuration file /etc/nginx/conf.d/ernie-ops.conf:
log_format ernie_ops '$remote_addr $pid $upstream_addr';
"""
BUILD = "nginx version: nginx/1.22.1\nconfigure arguments: --with-cc-opt='-g -O2' --prefix=/usr/share/nginx --pid-path=/run/nginx.pid"


def test_nginx_pid_file_comes_from_the_config_then_the_build_then_the_default():
    assert gateway.pid_file_of(DEBIAN_DUMP, BUILD, []) == Path("/run/nginx.pid")
    harness = "# configuration file /p/conf/nginx.conf:\ndaemon off;\n# pid /wrong.pid;\npid logs/nginx.pid;\n"
    assert gateway.pid_file_of(harness, BUILD, ["-p", "/p/", "-c", "conf/nginx.conf"]) == Path("/p/logs/nginx.pid")
    assert gateway.pid_file_of('events { } pid  "/var/run/n.pid" ;', BUILD, ["-p/q/"]) == Path("/var/run/n.pid")
    assert gateway.pid_file_of("worker_processes 1;", BUILD, []) == Path("/run/nginx.pid")  # built-in default
    assert gateway.pid_file_of("worker_processes 1;", "--prefix=/opt/ng --pid-path=logs/ng.pid", []) == Path("/opt/ng/logs/ng.pid")
    assert gateway.pid_file_of("", "", []) == Path("/run/nginx.pid")


def test_a_stale_pid_file_is_not_a_running_nginx(tmp_path):
    pid_file = tmp_path / "nginx.pid"
    assert gateway.read_pid(pid_file) is None  # missing
    pid_file.write_text("garbage\n")
    assert gateway.read_pid(pid_file) is None
    pid_file.write_text(f"{os.getpid()}\n")
    assert gateway.read_pid(pid_file) == os.getpid()
    assert not gateway.is_nginx(os.getpid())  # alive, but pytest, not nginx (a recycled pid)
    assert not gateway.is_nginx(0) and not gateway.is_nginx(2**22 + 1)  # above pid_max: no such process
