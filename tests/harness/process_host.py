"""The cutover's host operations for the integration tier, where there is no systemd: the real nginx,
gateway, probes and /metrics (RealHost), with units replaced by processes the test started.

`stop` and `start` are bookkeeping here, said plainly: a vLLM start costs 45 s on 2 cores, so the
instances stay up for the whole module and a "stopped" port is only marked so in a small JSON file
(shared with a cutover run in another process, for the kill -9 cases). What the runbook does before
a stop (drain: running + waiting at 0 on the instance's own /metrics) is real. Real `systemctl
start/stop` of ernie-vllm@PORT is covered by tests/e2e/test_cutover.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from ernie_ops.config import Config
from ernie_ops.serving import probe
from ernie_ops.traffic import hostops


class ProcessHost(hostops.RealHost):
    def __init__(self, cfg: Config, marks: Path):
        super().__init__(cfg)
        self.marks = marks

    def _stopped(self) -> set[int]:
        try:
            return set(json.loads(self.marks.read_text()))
        except (OSError, ValueError):
            return set()

    def _mark(self, port: int, stopped: bool) -> None:
        ports = self._stopped()
        ports = ports | {port} if stopped else ports - {port}
        self.marks.write_text(json.dumps(sorted(ports)))

    def unit_state(self, port: int) -> str:
        if port in self._stopped():
            return "inactive"
        try:
            up = httpx.get(f"{probe.base_url(port)}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            up = False
        return "active" if up else "inactive"

    def start(self, port: int, timeout: float) -> None:
        self._mark(port, False)

    def stop(self, port: int, timeout: float) -> None:
        self._mark(port, True)

    def set_enabled(self, port: int, enabled: bool) -> None:
        pass

    def port_problem(self, port: int) -> str | None:
        return None  # the instances run on purpose while "inactive" here
