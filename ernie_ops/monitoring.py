"""What Prometheus scrapes on an ERNIE host, derived from ernie.yaml: data only, no I/O.

The ernie_monitoring role writes these files from `ernie-ops monitoring ...` (the same instances the launcher
and the cutover use, never re-derived in Jinja):
  - file_sd targets of the instances (`targets`): one per configured port, labels host, port, unit, model; the
    host's Prometheus scrapes 127.0.0.1:PORT/metrics (the instances never listen elsewhere).
  - the blackbox exporter's modules (`blackbox_modules`): GET /health, and a real one-token completion of the
    served model through nginx, so availability as a client sees it is a series (probe_success).
  - a Prometheus config for the host (`prometheus_config`): the jobs prometheus/ernie-ops.rules.yml reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath

import yaml
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ernie_ops.config import Config

JOB_VLLM = "ernie-vllm"
JOB_NODE = "ernie-node"
JOB_HEALTH = "ernie-gateway-health"
JOB_COMPLETION = "ernie-gateway-completion"
MODULE_HEALTH = "ernie_health"
MODULE_COMPLETION = "ernie_completion"
HEADER = "# Written by `ernie-ops monitoring render` from /etc/ernie-ops/ernie.yaml (the ernie_monitoring role): edit that.\n"


def unit(port: int) -> str:
    return f"ernie-vllm@{port}.service"


def targets(cfg: Config, host: str) -> list[dict]:
    """file_sd entries for every configured instance, scraped on 127.0.0.1 by the host's Prometheus."""
    return [
        {
            "targets": [f"127.0.0.1:{inst.port}"],
            "labels": {"host": host, "port": str(inst.port), "unit": unit(inst.port), "model": cfg.model.served_name},
        }
        for inst in cfg.instances
    ]


def blackbox_modules(cfg: Config) -> dict:
    """The blackbox exporter's config: a /health GET and a one-token completion that must return a choice."""
    body = json.dumps({"model": cfg.model.served_name, "prompt": cfg.health.smoke_prompt, "max_tokens": 1})
    return {
        "modules": {
            MODULE_HEALTH: {"prober": "http", "timeout": "5s", "http": {"method": "GET", "valid_status_codes": [200]}},
            MODULE_COMPLETION: {
                "prober": "http",
                "timeout": "10s",
                "http": {
                    "method": "POST",
                    "headers": {"Content-Type": "application/json"},
                    "body": body,
                    "valid_status_codes": [200],
                    "fail_if_body_not_matches_regexp": ['"choices"'],
                },
            },
        }
    }


def probe_targets(cfg: Config, host: str, gateway: str | None = None) -> dict[str, list[dict]]:
    """file_sd entries of this host's gateway probes by kind (the URL a client uses), one file per probe job."""
    base = (gateway or cfg.gateway.url).rstrip("/")
    return {
        "health": [{"targets": [f"{base}/health"], "labels": {"host": host}}],
        "completion": [{"targets": [f"{base}/v1/completions"], "labels": {"host": host}}],
    }


def _probe_job(job: str, module: str, sd_file: str, blackbox: str, interval: str) -> dict:
    return {
        "job_name": job,
        "metrics_path": "/probe",
        "params": {"module": [module]},
        "scrape_interval": interval,
        "file_sd_configs": [{"files": [sd_file]}],
        "relabel_configs": [
            {"source_labels": ["__address__"], "target_label": "__param_target"},
            {"source_labels": ["__param_target"], "target_label": "instance"},
            {"target_label": "__address__", "replacement": blackbox},
        ],
    }


def prometheus_config(
    *,
    sd_dir: str,
    rules: list[str],
    node: str | None = "127.0.0.1:9100",
    node_host: str = "",
    blackbox: str | None = "127.0.0.1:9115",
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
    probe_interval: str = "15s",
) -> dict:
    """prometheus.yml: the instances from `{sd_dir}/ernie-vllm.json`, the probes from `{sd_dir}/ernie-probes-*.json`,
    the node exporter (labelled with its host), and the rule files."""
    jobs: list[dict] = [{"job_name": JOB_VLLM, "file_sd_configs": [{"files": [f"{sd_dir}/{JOB_VLLM}*.json"]}]}]
    if node:
        jobs.append({"job_name": JOB_NODE, "static_configs": [{"targets": [node], "labels": {"host": node_host}}]})
    if blackbox:
        jobs.append(_probe_job(JOB_HEALTH, MODULE_HEALTH, f"{sd_dir}/ernie-probes-health*.json", blackbox, probe_interval))
        jobs.append(_probe_job(JOB_COMPLETION, MODULE_COMPLETION, f"{sd_dir}/ernie-probes-completion*.json", blackbox, probe_interval))
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": list(rules),
        "scrape_configs": jobs,
    }


def watched_paths(cfg: Config) -> list[str]:
    """The paths whose filesystems ErnieDiskFilling watches: the model's versions, the state, the cache."""
    model_root = cfg.model.path.rstrip("/")
    if model_root.endswith("/current"):
        model_root = model_root[: -len("/current")]  # the versions live beside `current`
    return list(dict.fromkeys([model_root, cfg.paths.state_dir, cfg.paths.cache_dir]))


def mountpoint(path: str, ismount: Callable[[str], bool]) -> str:
    """The mount point holding `path` (the nearest existing ancestor that is one; '/' at the latest)."""
    p = PurePosixPath(path)
    for candidate in (p, *p.parents):
        if ismount(str(candidate)):
            return str(candidate)
    return "/"


def path_info(cfg: Config, ismount: Callable[[str], bool]) -> CollectorRegistry:
    """ernie_ops_path_info{mountpoint, paths} 1, one series per filesystem (paths: every watched path on it,
    comma-separated), for the node exporter's textfile collector (write it with prometheus_client.write_to_textfile):
    the rules join the filesystems' series on it, which needs one series per mount point."""
    by_mount: dict[str, list[str]] = {}
    for path in watched_paths(cfg):
        by_mount.setdefault(mountpoint(path, ismount), []).append(path)
    registry = CollectorRegistry()
    gauge = Gauge("ernie_ops_path_info", "The ERNIE paths on a filesystem, by its mount point.", ["mountpoint", "paths"], registry=registry)
    for mount, paths in by_mount.items():
        gauge.labels(mountpoint=mount, paths=", ".join(sorted(paths))).set(1)
    return registry


def render(
    cfg: Config,
    host: str,
    *,
    sd_dir: str = "/etc/prometheus/file_sd",
    rules: tuple[str, ...] = ("/etc/prometheus/rules/ernie-ops.rules.yml",),
    node: str | None = "127.0.0.1:9100",
    blackbox: str | None = "127.0.0.1:9115",
    ismount: Callable[[str], bool] = lambda _path: False,
) -> dict[str, str]:
    """Every file the monitoring role writes, by name, as text (`ernie-ops monitoring render` prints them)."""

    def as_json(entries: list[dict]) -> str:
        return json.dumps(entries, indent=2) + "\n"

    probes = probe_targets(cfg, host)
    prom = prometheus_config(sd_dir=sd_dir, rules=list(rules), node=node, node_host=host, blackbox=blackbox)
    return {
        "prometheus.yml": HEADER + yaml.safe_dump(prom, sort_keys=False),
        "blackbox.yml": HEADER + yaml.safe_dump(blackbox_modules(cfg), sort_keys=False),
        f"{JOB_VLLM}.json": as_json(targets(cfg, host)),
        "ernie-probes-health.json": as_json(probes["health"]),
        "ernie-probes-completion.json": as_json(probes["completion"]),
        "ernie_ops_paths.prom": generate_latest(path_info(cfg, ismount)).decode(),
    }
