"""Debian's prometheus, prometheus-blackbox-exporter and prometheus-node-exporter as test processes: private
config and data directories, 127.0.0.1 ports, started and stopped by PID (never the packages' services)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from tests.conftest import free_port

BINARIES = ("prometheus", "promtool", "prometheus-blackbox-exporter", "prometheus-node-exporter")


def why_unavailable() -> str | None:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    return f"not installed: {', '.join(missing)} (Debian's prometheus packages; `make test` installs them)" if missing else None


@dataclass
class Process:
    name: str
    proc: subprocess.Popen
    log: Path
    url: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _start(name: str, argv: list[str], work: Path, port: int, ready_path: str) -> Process:
    log = work / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
    p = Process(name, proc, log, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{p.output()[-3000:]}")
        try:
            if httpx.get(p.url + ready_path, timeout=2).status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    p.stop()
    raise RuntimeError(f"{name} did not answer {ready_path} within 30 s:\n{p.output()[-3000:]}")


def blackbox(work: Path, modules: dict) -> Process:
    work.mkdir(parents=True, exist_ok=True)
    (work / "blackbox.yml").write_text(yaml.safe_dump(modules))
    port = free_port()
    argv = ["prometheus-blackbox-exporter", f"--config.file={work / 'blackbox.yml'}", f"--web.listen-address=127.0.0.1:{port}"]
    return _start("blackbox", argv, work, port, "/metrics")


def node_exporter(work: Path, textfile_dir: Path) -> Process:
    """Filesystems and the textfile collector only: outside the sandbox there is no systemd to ask."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = ["prometheus-node-exporter", "--collector.disable-defaults", "--collector.filesystem", "--collector.textfile",
            f"--collector.textfile.directory={textfile_dir}", f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    return _start("node", argv, work, port, "/metrics")


@dataclass
class Prometheus(Process):
    rules: list[Path] = field(default_factory=list)

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query, now or `at` (Unix seconds)."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        r = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        body = r.json()
        if body.get("status") != "success":
            raise AssertionError(f"query failed: {expr}\n{body}")
        return body["data"]["result"]

    def alerts(self) -> list[dict]:
        return httpx.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]

    def loaded_rules(self) -> list[dict]:
        """Every loaded rule with its health, last error and last evaluation time."""
        groups = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        return [r for g in groups for r in g["rules"]]

    def wait(self, what: str, check, timeout: float = 60, every: float = 0.5):
        """Poll `check()` until it returns something truthy; fail with `what` and the last value."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"{what}: not within {timeout} s (last: {last})\n{self.output()[-2000:]}")


def prometheus(work: Path, config: dict, rules: dict[str, str]) -> Prometheus:
    """prometheus with `config` (its rule_files are replaced by `rules`: {file name: text}), a private TSDB."""
    work.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in rules.items():
        (work / name).write_text(text)
        paths.append(work / name)
    (work / "prometheus.yml").write_text(yaml.safe_dump({**config, "rule_files": [str(p) for p in paths]}, sort_keys=False))
    port = free_port()
    argv = ["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
    p = _start("prometheus", argv, work, port, "/-/ready")
    return Prometheus(p.name, p.proc, p.log, p.url, rules=paths)


def with_short_for(rules_text: str, seconds: int = 2) -> str:
    """The rule file with every `for:` shortened: the integration tier sees an alert fire in seconds."""
    data = yaml.safe_load(rules_text)
    for group in data["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{seconds}s"
    return yaml.safe_dump(data, sort_keys=False)
