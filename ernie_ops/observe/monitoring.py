"""What Prometheus scrapes on an ERNIE host, derived from ernie.yaml: data only, no I/O.

The ernie_monitoring role writes these files from `ernie-ops monitoring ...` (the same instances the launcher
and the cutover use, never re-derived in Jinja):
  - file_sd targets of the instances (`targets`): one per configured port, labels host, port, unit, model; the
    host's Prometheus scrapes 127.0.0.1:PORT/metrics (the instances never listen elsewhere).
  - the blackbox exporter's modules (`blackbox_modules`): GET /health, and a real one-token completion of the
    served model through nginx, so availability as a client sees it is a series (probe_success).
  - a Prometheus config for the host (`prometheus_config`): the jobs prometheus/ernie-ops.rules.yml reads.
  - nginx's scrape map (`scrape_map`): `/metrics/PORT` and `/metrics/node` on the gateway, allow-listed, so a
    central Prometheus on another host scrapes each instance and the node exporter without any of them
    listening beyond 127.0.0.1.
  - this host as a central Prometheus sees it (`remote_targets`): the same targets and probes through the
    gateway's URL; the central host writes them under `{sd_dir}/remote/` (role variable
    ernie_monitoring_scrape_hosts) and evaluates the same rules on them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath
from urllib.parse import urlsplit

import yaml
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ernie_ops.config import Config

JOB_VLLM = "ernie-vllm"
JOB_NODE = "ernie-node"
JOB_HEALTH = "ernie-gateway-health"
JOB_COMPLETION = "ernie-gateway-completion"
# file_sd file stems, one per job; a central Prometheus keeps the other hosts' in REMOTE_DIR as STEM@HOST.json
SD_VLLM, SD_NODE, SD_HEALTH, SD_COMPLETION = "ernie-vllm", "ernie-node", "ernie-probes-health", "ernie-probes-completion"
REMOTE_DIR = "remote"
SCRAPE_PATH = "/metrics"  # nginx: SCRAPE_PATH/PORT is an instance's /metrics, SCRAPE_PATH/node the node exporter's
MODULE_HEALTH = "ernie_health"
MODULE_COMPLETION = "ernie_completion"
HEADER = "# Written by `ernie-ops monitoring render` from /etc/ernie-ops/ernie.yaml (roles ernie_monitoring, ernie_nginx): edit that.\n"


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


def node_targets(host: str, node: str) -> list[dict]:
    """file_sd entry of the host's node exporter (labelled with the host, like the instances)."""
    return [{"targets": [node], "labels": {"host": host}}]


def scrape_map(cfg: Config, node: str | None) -> str:
    """nginx map entries (`$uri` -> backend) for the gateway's `location ^~ /metrics/`: every configured instance
    and, when it runs, the node exporter. Any other name under /metrics/ is a 404."""
    lines = [f"{SCRAPE_PATH}/{inst.port} 127.0.0.1:{inst.port};" for inst in cfg.instances]
    if node:
        lines.append(f"{SCRAPE_PATH}/node {node};")
    return HEADER + "\n".join(lines) + "\n"


def remote_targets(cfg: Config, host: str, url: str, node: bool) -> dict[str, list[dict]]:
    """This host as a central Prometheus scrapes it, by file_sd stem: each instance and the node exporter through
    the gateway at `url` (scheme://address[:port], the nginx scrape map's paths), the probes of that same URL."""
    parsed = urlsplit(url)
    address, scheme = parsed.netloc, parsed.scheme or "http"

    def via_gateway(path: str, labels: dict[str, str]) -> dict:
        return {"targets": [address], "labels": {**labels, "__scheme__": scheme, "__metrics_path__": path}}

    files = {SD_VLLM: [via_gateway(f"{SCRAPE_PATH}/{t['labels']['port']}", t["labels"]) for t in targets(cfg, host)]}
    if node:
        files[SD_NODE] = [via_gateway(f"{SCRAPE_PATH}/node", {"host": host})]
    probes = probe_targets(cfg, host, gateway=url)
    files[SD_HEALTH], files[SD_COMPLETION] = probes["health"], probes["completion"]
    return files


def blackbox_modules(cfg: Config, key_file: str | None = None) -> dict:
    """The blackbox exporter's config: a /health GET and a one-token completion that must return a choice; when
    the gateway requires API keys, the completion sends the bearer key read from `key_file` (a 401 is a failure)."""
    body = json.dumps({"model": cfg.model.served_name, "prompt": cfg.health.smoke_prompt, "max_tokens": 1})
    completion: dict = {
        "method": "POST",
        "headers": {"Content-Type": "application/json"},
        "body": body,
        "valid_status_codes": [200],
        "fail_if_body_not_matches_regexp": ['"choices"'],
    }
    health: dict = {"method": "GET", "valid_status_codes": [200]}
    if key_file:
        completion["authorization"] = {"type": "Bearer", "credentials_file": key_file}
    if cfg.gateway.ca_file:  # an https gateway: its certificate checked as a client checks it
        for module in (health, completion):
            module["tls_config"] = {"ca_file": cfg.gateway.ca_file}
    return {
        "modules": {
            MODULE_HEALTH: {"prober": "http", "timeout": "5s", "http": health},
            MODULE_COMPLETION: {"prober": "http", "timeout": "10s", "http": completion},
        }
    }


def probe_targets(cfg: Config, host: str, gateway: str | None = None) -> dict[str, list[dict]]:
    """file_sd entries of this host's gateway probes by kind (the URL a client uses), one file per probe job."""
    base = (gateway or cfg.gateway.url).rstrip("/")
    return {
        "health": [{"targets": [f"{base}/health"], "labels": {"host": host}}],
        "completion": [{"targets": [f"{base}/v1/completions"], "labels": {"host": host}}],
    }


def _sd(sd_dir: str, stem: str) -> list[dict]:
    """This host's file (and a test's extra ones: STEM-NAME.json), then the other hosts' of a central Prometheus."""
    return [{"files": [f"{sd_dir}/{stem}*.json", f"{sd_dir}/{REMOTE_DIR}/{stem}@*.json"]}]


def _probe_job(job: str, module: str, sd: list[dict], blackbox: str, interval: str) -> dict:
    return {
        "job_name": job,
        "metrics_path": "/probe",
        "params": {"module": [module]},
        "scrape_interval": interval,
        "file_sd_configs": sd,
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
    node: bool = True,
    blackbox: str | None = "127.0.0.1:9115",
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
    probe_interval: str = "15s",
) -> dict:
    """prometheus.yml: the instances, the node exporters and the probes from file_sd (this host's files in
    `sd_dir`, the other hosts' of a central Prometheus in `sd_dir/remote`), and the rule files."""
    jobs: list[dict] = [{"job_name": JOB_VLLM, "file_sd_configs": _sd(sd_dir, SD_VLLM)}]
    if node:
        jobs.append({"job_name": JOB_NODE, "file_sd_configs": _sd(sd_dir, SD_NODE)})
    if blackbox:
        jobs.append(_probe_job(JOB_HEALTH, MODULE_HEALTH, _sd(sd_dir, SD_HEALTH), blackbox, probe_interval))
        jobs.append(_probe_job(JOB_COMPLETION, MODULE_COMPLETION, _sd(sd_dir, SD_COMPLETION), blackbox, probe_interval))
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
    remote_url: str | None = None,
    probe_key_file: str | None = None,
) -> dict[str, str]:
    """Every file the monitoring and nginx roles write, by name, as text (`ernie-ops monitoring render` prints
    them); with `remote_url` also `remote/STEM@HOST.json`, this host's targets for a central Prometheus."""

    def as_json(entries: list[dict]) -> str:
        return json.dumps(entries, indent=2) + "\n"

    probes = probe_targets(cfg, host)
    prom = prometheus_config(sd_dir=sd_dir, rules=list(rules), node=bool(node), blackbox=blackbox)
    files = {
        "prometheus.yml": HEADER + yaml.safe_dump(prom, sort_keys=False),
        "blackbox.yml": HEADER + yaml.safe_dump(blackbox_modules(cfg, probe_key_file), sort_keys=False),
        f"{SD_VLLM}.json": as_json(targets(cfg, host)),
        f"{SD_HEALTH}.json": as_json(probes["health"]),
        f"{SD_COMPLETION}.json": as_json(probes["completion"]),
        "ernie_ops_paths.prom": generate_latest(path_info(cfg, ismount)).decode(),
        "scrape-targets.map": scrape_map(cfg, node),
    }
    if node:
        files[f"{SD_NODE}.json"] = as_json(node_targets(host, node))
    if remote_url:
        for stem, entries in remote_targets(cfg, host, remote_url, node=bool(node)).items():
            files[f"{REMOTE_DIR}/{stem}@{host}.json"] = as_json(entries)
    return files
