"""The one config file (`/etc/ernie-ops/ernie.yaml`): schema, defaults, loading and error reporting.

The launcher, the CLI and the chat app all read this file through `load()`. Every problem is
reported at once with file, line, field, bad value and what is allowed, because an operator
fixing a config at 3 a.m. should not have to run the check five times. Unknown keys are
errors: a typo such as `max_model_length` must not silently fall back to a default, and a key
given twice (two `model:` sections) is an error naming both lines, never a silent override.

The chat app's features own their sections (`chat.config.ChatConfig` composes `docs.config`, `copy.config`,
`onboarding.config` and `hr.config`); this module composes `chat` with the engine, gateway and cutover sections.
"""

from __future__ import annotations

import difflib
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from ernie_ops.chat.config import ChatConfig
from ernie_ops.config_section import Section, first_duplicate
from ernie_ops.errors import MISSING, ConfigError, ConfigProblem, UsageError
from ernie_ops.files import yamlfile

DEFAULT_PATH = "/etc/ernie-ops/ernie.yaml"
ENV_VAR = "ERNIE_OPS_CONFIG"
GPU_BUDGET = 0.95  # instances side by side on one GPU must leave this much of it for the CUDA contexts


class ModelConfig(Section):
    """Where the weights live and the name clients must use."""

    path: str = Field("/srv/models/ernie-4.5-0.3b-pt/current", min_length=1)
    served_name: str = Field("ernie-4.5-0.3b-pt", pattern=r"^[A-Za-z0-9._/-]+$")
    revision: str | None = Field(None, description="hub revision the weights came from (recorded, not fetched)")


class VllmConfig(Section):
    """Engine settings turned into vLLM flags by `engine.build_command`."""

    accelerator: Literal["auto", "gpu", "cpu"] = "auto"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int = Field(8192, ge=64, le=131072)
    gpu_memory_utilization: float = Field(0.45, gt=0.0, le=0.98)
    max_num_seqs: int = Field(256, ge=1, le=4096)
    enable_prefix_caching: bool = True
    # CUDA graphs stay on for this dense model on GPU (eager mode costs it throughput there); CPU hosts may turn this on to start faster.
    enforce_eager: bool = False
    shutdown_drain_seconds: int = Field(30, ge=0, le=3600)
    stop_grace_seconds: float = Field(10.0, ge=1.0, le=600.0)
    cpu_kvcache_space_gib: int = Field(4, ge=1, le=1024)
    access_log: bool = False
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flags(cls, value: list[str]) -> list[str]:
        owned = {"--host", "--port", "--model", "--served-model-name", "--shutdown-timeout"}
        clash = sorted({a.split("=", 1)[0] for a in value} & owned)
        if clash:
            raise ValueError(f"{', '.join(clash)} is set by ernie-ops from the config; remove it from extra_args")
        return value


class InstanceConfig(Section):
    """One vLLM server: a port, and the GPU (or CPU cores) it owns."""

    port: int = Field(ge=1024, le=65535)
    gpu: int | None = Field(None, ge=0, le=63)
    cpu_cores: str | None = Field(None, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
    slot: int | None = Field(None, ge=0, le=63, description="with pool.replicas > 1: the slot (0..replicas-1) this port serves")

    @field_validator("cpu_cores")
    @classmethod
    def _ranges_ascend(cls, value: str | None) -> str | None:
        for part in (value or "").split(","):
            first, _, last = part.partition("-")
            if last and int(last) < int(first):
                raise ValueError(f"range {part} is reversed (it names no core); write {last}-{first}")
        return value


def parse_cpu_list(text: str) -> frozenset[int]:
    """ "0-3,6" -> {0, 1, 2, 3, 6} (the format of instances[].cpu_cores and of Linux's cpu lists)"""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _cpu_list_text(cpus: set[int] | frozenset[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5" """
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class PoolConfig(Section):
    """How many replicas of the model serve at once on this host (docs/design/replica-pool.md).

    1 (the default): one instance is routed and the others are its spares, as a cutover has always used them.
    N: the instances are grouped into N slots by `instances[].slot`, one device each (a GPU, or a set of cores);
    a slot's first port serves and its second, if any, is where its next version starts beside it."""

    replicas: int = Field(1, ge=1, le=64)
    balance: Literal["least_conn", "round_robin"] = "least_conn"
    session_affinity: bool = Field(True, description="requests that carry a session key go to one replica (consistent hash)")


@dataclass(frozen=True)
class Slot:
    """A device of the pool and its ports: the first serves, a second is the slot's surge port."""

    index: int
    ports: tuple[int, ...]
    gpu: int | None = None
    cpu_cores: str | None = None

    def device(self) -> str:
        if self.gpu is not None:
            return f"gpu {self.gpu}"
        return f"cores {self.cpu_cores}" if self.cpu_cores else "the host's default device"


class PathsConfig(Section):
    cache_dir: str = "/var/cache/ernie-ops"
    state_dir: str = "/var/lib/ernie-ops"


class GatewayConfig(Section):
    """The nginx in front of the instances."""

    url: str = Field("http://127.0.0.1:80", pattern=r"^https?://")
    upstream_file: str = "/etc/nginx/ernie-ops/upstream.conf"
    nginx_binary: str = "/usr/sbin/nginx"
    nginx_args: list[str] = Field(default_factory=list)
    access_log: str | None = Field(
        "/var/log/nginx/ernie-ops.access.log",
        description="the gateway's access log (format ernie_ops): per-instance outcomes for the canary gate; null: vLLM's counters only",
    )
    ca_file: str | None = Field(
        None,
        description="an https url's certificate is verified against this CA file (a private CA, a lab's self-signed "
        "certificate); null: the system's trust store",
    )

    @field_validator("ca_file")
    @classmethod
    def _absolute_ca_file(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be the absolute path of the CA's PEM file, e.g. /etc/ernie-ops/tls/gateway.crt")
        return v

    def tls_verify(self) -> ssl.SSLContext | bool:
        """What an httpx client to `url` verifies the certificate with, as any client of the gateway would."""
        if not self.ca_file:
            return True
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"gateway.ca_file {self.ca_file}: {getattr(exc, 'strerror', None) or exc}; it must be the PEM file of the CA "
                "that signed the gateway's certificate (ernie_edge's self-signed one: /etc/ernie-ops/tls/gateway.crt)"
            ) from None


class HealthConfig(Section):
    """How the launcher and the cutover decide that an instance can serve."""

    poll_interval_seconds: float = Field(0.1, gt=0.0, le=10.0)
    request_timeout_seconds: float = Field(5.0, gt=0.0, le=600.0)
    smoke_prompt: str = Field("Hello", min_length=1)
    smoke_max_tokens: int = Field(1, ge=1, le=64)
    smoke_timeout_seconds: float = Field(60.0, gt=0.0, le=3600.0)


def steps_problem(steps: list[int]) -> str | None:
    """Why canary steps are not percentages rising between 1 and 99; None when they are (config and --canary)."""
    for a, b in zip([0, *steps], steps, strict=False):
        if not 0 < b < 100:
            return f"step {b}% is not between 1 and 99 (100% comes after the last step by itself)"
        if b <= a:
            return f"steps must rise: {b}% after {a}%"
    return None


class SloConfig(Section):
    """What a canary (or a baking new instance) must keep, judged per instance from deltas of its own counters
    and histograms in the same window as the baseline's. A quantile limit is judged as a share: "p99 <= T" holds
    when at most 1% of requests took longer than T, and that share is bounded (binomial, `confidence`) before
    a verdict, so a handful of requests is "inconclusive", never "pass"."""

    max_error_rate: float = Field(0.01, gt=0.0, lt=1.0, description="failed share of requests (gateway 5xx, vLLM error/abort)")
    ttft_quantile: float = Field(0.99, ge=0.5, lt=1.0, description="which time-to-first-token quantile is judged")
    ttft_seconds: float | None = Field(2.0, gt=0.0, le=600.0, description="its absolute limit; null: against the baseline only")
    itl_quantile: float = Field(0.99, ge=0.5, lt=1.0, description="which inter-token latency quantile is judged")
    itl_seconds: float | None = Field(0.5, gt=0.0, le=60.0, description="its absolute limit; null: against the baseline only")
    max_ratio: float = Field(1.5, ge=1.0, le=100.0, description="a canary's quantile may be this many times the baseline's")
    ratio_floor_seconds: float = Field(0.05, ge=0.0, le=60.0, description="below this a slower canary is not judged slower")
    confidence: float = Field(0.95, ge=0.5, le=0.999, description="of the bounds on error and slow-request shares")


class EvalGateConfig(Section):
    """The cutover's quality gate: a golden set run against the new instance (and the old) before traffic moves."""

    file: str | None = Field(
        None,
        description="the golden set (YAML, `ernie-ops eval`'s format), an absolute path so it means the same file on every host "
        "and from every working directory; null: no quality gate (off by default: a set must be written for the model)",
    )
    min_pass_rate: float = Field(
        1.0, ge=0.0, le=1.0, description="the new instance's weighted pass rate must reach this (1.0: a golden set is all must-pass)"
    )
    max_drop: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="and be at most this far below the old instance's on the same set (0: no regression allowed, as a golden set's "
        "cases are ones the model in service passes)",
    )

    @field_validator("file")
    @classmethod
    def _absolute_file(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be the absolute path of the golden set, e.g. /etc/ernie-ops/eval/smoke.yaml")
        return v


class CutoverConfig(Section):
    """`ernie-ops cutover`: bake window and canary steps (each overridable on the command line)."""

    bake_seconds: float = Field(
        0.0, ge=0.0, le=7 * 86400, description="watch the new instance this long with the old one warm; 0: none; 600 recommended"
    )
    canary_steps: list[int] = Field(default_factory=list, description="percent of traffic on the new instance per step, e.g. [5, 25, 50]")
    sticky: Literal["none", "api_key", "client"] = Field(
        "none", description="during canary steps, keep a client on one side: by API key (else address), or by address"
    )
    step_min_seconds: float = Field(60.0, ge=0.0, le=86400.0, description="each step is held at least this long")
    step_min_requests: int = Field(100, ge=1, le=10_000_000, description="and until the canary has served this many")
    step_max_seconds: float = Field(900.0, gt=0.0, le=7 * 86400, description="a step still inconclusive after this is rolled back")
    interval_seconds: float = Field(1.0, ge=0.1, le=60.0, description="how often both instances are measured and judged")
    window_seconds: float = Field(30.0, ge=0.5, le=3600.0, description="the recent window a breach is looked for in")
    synthetic_rps: float = Field(2.0, ge=0.0, le=100.0, description="own requests per second to each side while it has too few; 0: none")
    synthetic_max_tokens: int = Field(16, ge=2, le=256, description="tokens per synthetic request (two or more: inter-token latency)")
    slo: SloConfig = Field(default_factory=SloConfig)
    eval: EvalGateConfig = Field(default_factory=EvalGateConfig)

    @field_validator("canary_steps")
    @classmethod
    def _steps_rise(cls, steps: list[int]) -> list[int]:
        if (problem := steps_problem(steps)) is not None:
            raise ValueError(problem)
        return steps


class MonitoringConfig(Section):
    """What ernie-ops itself gives Prometheus (the ernie_monitoring role sets it)."""

    textfile: str | None = Field(
        None,
        description="cutover marks for the node exporter's textfile collector (a .prom file in its directory); null: none",
        pattern=r"^/.+\.prom$",
    )


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    instances: list[InstanceConfig] = Field(default_factory=lambda: [InstanceConfig(port=8000), InstanceConfig(port=8001)], min_length=1)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    cutover: CutoverConfig = Field(default_factory=CutoverConfig)
    chat: ChatConfig = Field(default_factory=ChatConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    pool: PoolConfig = Field(default_factory=PoolConfig)

    @field_validator("instances")
    @classmethod
    def _unique_ports(cls, instances: list[InstanceConfig]) -> list[InstanceConfig]:
        ports = [i.port for i in instances]
        if (dupe := first_duplicate(ports)) is not None:
            raise ValueError(f"port {dupe} is listed more than once; each instance needs its own port")
        return instances

    def instance(self, port: int) -> InstanceConfig:
        """The instance on `port`, or a usage error naming the configured ports."""
        for inst in self.instances:
            if inst.port == port:
                return inst
        known = ", ".join(str(i.port) for i in self.instances)
        raise UsageError(f"port {port} is not an instance in the config (instances: {known}); add it under `instances:`")

    def instance_index(self, port: int) -> int:
        return [i.port for i in self.instances].index(self.instance(port).port)

    def slots(self) -> list[Slot]:
        """The pool's slots in index order. One replica without named slots: a single slot of every instance
        (the routed one and its spares). Assumes a config that passed `parse` (every slot named when replicas > 1)."""
        if self.pool.replicas == 1 and all(i.slot is None for i in self.instances):
            first = self.instances[0]
            return [Slot(0, tuple(i.port for i in self.instances), first.gpu, first.cpu_cores)]
        by_slot: dict[int, list[InstanceConfig]] = {}
        for inst in self.instances:
            by_slot.setdefault(inst.slot if inst.slot is not None else 0, []).append(inst)
        return [Slot(k, tuple(i.port for i in insts), insts[0].gpu, insts[0].cpu_cores) for k, insts in sorted(by_slot.items())]

    def chat_gateway_url(self) -> str:
        return (self.chat.gateway_url or self.gateway.url).rstrip("/")


def resolve_path(explicit: str | None = None) -> str:
    """--config wins, then $ERNIE_OPS_CONFIG, then the standard path."""
    return explicit or os.environ.get(ENV_VAR) or DEFAULT_PATH


def load(path: str | None = None) -> Config:
    """Read, validate and return the config; raise ConfigError listing every problem."""
    source = resolve_path(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [ConfigProblem(source, None, "(file)", MISSING, f"not found; create it or point --config / ${ENV_VAR} at one")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(source, None, "(file)", MISSING, f"cannot be read: {exc}")]) from None
    return parse(text, source)


def parse(text: str, source: str = "<string>") -> Config:
    """Validate YAML text against the schema; the text-level half of `load`, for tests and tools."""
    try:
        doc = yamlfile.load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yamlfile.problems(exc, source)) from None
    data, lines = ({} if doc.data is None else doc.data), doc.lines
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(source, 1, "(top level)", data, "must be a mapping of sections: " + _allowed(Config))])
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(err, data, lines, source) for err in exc.errors()]
        raise ConfigError(sorted(problems, key=lambda p: p.line or 0)) from None
    problems = [_located(path, message, data, lines, source) for path, message in _cross_checks(cfg, lines)]
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: p.line or 0))
    return cfg


def _cross_checks(cfg: Config, lines: dict[tuple, int] | None = None) -> list[tuple[tuple, str]]:
    """Rules that span fields or sections, as (key path, message): pydantic checks one field at a time."""
    out: list[tuple[tuple, str]] = _core_checks(cfg, lines or {}) + _pool_checks(cfg)
    co = cfg.cutover
    if co.step_max_seconds < co.step_min_seconds:
        out.append(
            (
                ("cutover", "step_max_seconds"),
                f"{co.step_max_seconds:g} is below step_min_seconds {co.step_min_seconds:g}; no step could pass",
            )
        )
    if co.window_seconds < 2 * co.interval_seconds:
        out.append(
            (
                ("cutover", "window_seconds"),
                f"{co.window_seconds:g} s holds fewer than two measurements at interval_seconds {co.interval_seconds:g}; "
                f"make it at least {2 * co.interval_seconds:g}",
            )
        )
    chat = cfg.chat
    room = cfg.vllm.max_model_len - chat.max_tokens - chat.margin_tokens
    if room < 16:
        out.append(
            (
                ("chat", "max_tokens"),
                f"max_tokens {chat.max_tokens} + margin_tokens {chat.margin_tokens} leave {room} tokens for the prompt "
                f"within vllm.max_model_len {cfg.vllm.max_model_len}; at least 16 are needed",
            )
        )
    out += [(("chat", *path), message) for path, message in chat.scenario_problems()]
    return out


def _core_checks(cfg: Config, lines: dict[tuple, int]) -> list[tuple[tuple, str]]:
    """CPU instances must not share cores: one bound to its neighbour's cores never becomes ready beside it (measured).

    Only explicit `cpu_cores` can be compared here. The default split (`engine.cpu_cores_for`: instance
    k of n gets the k-th 1/n of the host's cores) knows nothing of named cores, so whether it overlaps
    them depends on the host's core count: named on some instances and not on others is refused too.
    "auto" is checked like "cpu": cpu_cores only matter on CPU, so naming overlapping ones is a mistake anyway.
    """
    if cfg.vllm.accelerator == "gpu":
        return []
    named = [(i, inst, parse_cpu_list(inst.cpu_cores)) for i, inst in enumerate(cfg.instances) if inst.cpu_cores]
    if not named:
        return []

    def where(i: int) -> str:
        line = lines.get(("instances", i, "cpu_cores")) or lines.get(("instances", i))
        return f"instances[{i}], port {cfg.instances[i].port}" + (f", line {line}" if line else "")

    gpu_hint = "; on a GPU host set vllm.accelerator: gpu (cpu_cores are not used there)" if cfg.vllm.accelerator == "auto" else ""
    out: list[tuple[tuple, str]] = []
    for n, (i, inst, cores) in enumerate(named):
        for j, other, other_cores in named[:n]:
            shared = cores & other_cores
            if shared:
                out.append(
                    (
                        ("instances", i, "cpu_cores"),
                        f"instance {inst.port} shares core(s) {_cpu_list_text(shared)} with instance {other.port} "
                        f"({where(j)}, cpu_cores '{other.cpu_cores}'): on CPU an instance bound to its neighbour's cores "
                        f"never becomes ready beside it; give each instance its own cores{gpu_hint}",
                    )
                )
    first = named[0]
    for i, inst in enumerate(cfg.instances):
        if not inst.cpu_cores:
            out.append(
                (
                    ("instances", i, "cpu_cores"),
                    f"not set for instance {inst.port}, but instance {first[1].port} ({where(first[0])}) names cores "
                    f"'{first[1].cpu_cores}': the default split of the host's cores ignores named cores and can overlap them; "
                    f"set cpu_cores on every instance, or on none{gpu_hint}",
                )
            )
    return out


def _pool_checks(cfg: Config) -> list[tuple[tuple, str]]:
    """A pool that cannot serve as configured, with the numbers and the fix: unnamed or out-of-range slots, an empty
    slot, a slot with more than a replica and a surge port or spread over two devices, and more slots on one GPU than
    its memory holds. (Overlapping cores are `_core_checks`'.)"""
    n = cfg.pool.replicas
    out: list[tuple[tuple, str]] = []
    named = any(i.slot is not None for i in cfg.instances)
    if n == 1 and not named:
        return out
    for i, inst in enumerate(cfg.instances):
        if inst.slot is None and n == 1:
            out.append((("instances", i, "slot"), f"not set for instance {inst.port}, but other instances name theirs: with "
                        "pool.replicas 1 give every instance slot 0, or name none"))  # fmt: skip
        elif inst.slot is None:
            out.append((("instances", i, "slot"), f"not set for instance {inst.port}, but pool.replicas is {n}: give every "
                        f"instance its slot (0-{n - 1}); the ernie_vllm role fills them from nvidia-smi or the host's cores"))  # fmt: skip
        elif inst.slot >= n:
            out.append((("instances", i, "slot"), f"{inst.slot} for instance {inst.port}, but pool.replicas {n} has slots "
                        f"0-{n - 1}: raise pool.replicas or give this instance one of those slots"))  # fmt: skip
    if out:
        return out
    slots = cfg.slots()
    missing = sorted(set(range(n)) - {s.index for s in slots})
    if missing:
        out.append((("pool", "replicas"), f"{n}, but no instance serves slot(s) {', '.join(map(str, missing))}: "
                    f"add an instance per missing slot or lower pool.replicas to {n - len(missing)}"))  # fmt: skip
    index = {inst.port: i for i, inst in enumerate(cfg.instances)}
    for slot in slots:
        insts = [cfg.instance(p) for p in slot.ports]
        if len(insts) > 2:
            out.append((("instances", index[slot.ports[2]], "slot"), f"slot {slot.index} has ports "
                        f"{', '.join(map(str, slot.ports))}: a slot holds its replica and at most one surge port"))  # fmt: skip
        devices = {(i.gpu, i.cpu_cores) for i in insts}
        if len(devices) > 1:
            said = ", ".join(f"{i.port} ({Slot(slot.index, (i.port,), i.gpu, i.cpu_cores).device()})" for i in insts)
            out.append((("instances", index[slot.ports[1]], "slot"), f"slot {slot.index}'s ports name different devices: "
                        f"{said}; a surge port starts beside its replica, on the same GPU or cores"))  # fmt: skip
    util = cfg.vllm.gpu_memory_utilization
    on_gpu: dict[int, list[Slot]] = {}
    for slot in slots:
        if slot.gpu is not None:
            on_gpu.setdefault(slot.gpu, []).append(slot)
    for gpu, shared in sorted(on_gpu.items()):
        if len(shared) * util > GPU_BUDGET:
            out.append((("pool", "replicas"), f"gpu {gpu} carries slots {', '.join(str(s.index) for s in shared)}, each with "
                        f"vllm.gpu_memory_utilization {util}: together {len(shared) * util:.2f} of it (limit {GPU_BUDGET}); "
                        f"set vllm.gpu_memory_utilization <= {GPU_BUDGET / len(shared):.2f} or move slots to other GPUs"))  # fmt: skip
    return out


def _located(path: tuple, message: str, data: dict, lines: dict[tuple, int], source: str) -> ConfigProblem:
    field = yamlfile.dotted(path)
    line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
    return ConfigProblem(source, line, field, yamlfile.lookup(data, path), message)


def _model_at(path: tuple) -> type[Section] | None:
    """The config section that owns the last key of `path` (to list allowed keys). Only sections count: the
    onboarding plan templates are `onboarding.plan`'s own models, and their unknown keys say just that."""
    model: Any = Config
    for part in path[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        model = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, Section)), None)
        if model is None:
            return None
    return model


def _allowed(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _problem(err: dict, data: dict, lines: dict[tuple, int], source: str) -> ConfigProblem:
    path = yamlfile.data_path(tuple(err["loc"]))
    field = yamlfile.dotted(path) or "(top level)"
    line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
    value = yamlfile.lookup(data, path)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(path)
        msg = "unknown key"
        if model is not None:
            close = difflib.get_close_matches(str(path[-1]), list(model.model_fields), n=1)
            msg += f" (did you mean '{close[0]}'?)" if close else ""
            msg += f"; allowed here: {_allowed(model)}"
        return ConfigProblem(source, line, field, value, msg)
    if kind == "missing":
        return ConfigProblem(source, line, field, MISSING, "required; add it")
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return ConfigProblem(source, line, field, value, message)


def dump(config: Config) -> str:
    """The resolved config as YAML (what `config check` prints)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
