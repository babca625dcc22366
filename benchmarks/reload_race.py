"""The keep-alive race at an nginx reload, measured side by side: the project's site file as shipped
(`keepalive_timeout 0`) vs the same file with client keep-alive on (nginx's default 65 s).

One real vLLM instance; two nginx prefixes in front of it. For each, 8 threads of the official
openai client (max_retries=0) send short completions while the upstream is rewritten and nginx
reloaded every 150 ms for 20 s. Also prints the raw switch latency: upstream written -> first
response from the new port, for a bare rewrite + reload.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.reload_race
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import openai

from ernie_ops import config, gateway
from tests.conftest import CACHE, free_port, write_config
from tests.harness import nginx, serve_proc, tiny_model


def race(ng: nginx.Nginx, port: int, seconds: float = 20.0) -> tuple[int, int, int, list[str]]:
    gw = gateway.Gateway(config.GatewayConfig(**ng.gateway_config()))
    client = openai.OpenAI(base_url=f"{ng.url}/v1", api_key="none", max_retries=0, timeout=30)
    stop, lock = threading.Event(), threading.Lock()
    res = {"ok": 0, "failed": 0}
    errors: list[str] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                client.completions.create(model=tiny_model.SERVED_NAME, prompt="Hi", max_tokens=2)
                with lock:
                    res["ok"] += 1
            except openai.OpenAIError as exc:
                with lock:
                    res["failed"] += 1
                    errors.append(type(exc).__name__)

    threads = [threading.Thread(target=loop) for _ in range(8)]
    for t in threads:
        t.start()
    reloads = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gw.switch(port)
        reloads += 1
        time.sleep(0.15)
    stop.set()
    for t in threads:
        t.join()
    return reloads, res["ok"], res["failed"], errors


def switch_latency(ng: nginx.Nginx, a: int, b: int, runs: int = 10) -> dict[str, list[float]]:
    """Idle, alternating: seconds from the upstream write until /health answers from the new port, for
    a bare rewrite + `nginx -s reload` and for `ernie-ops`'s switch (rewrite + `nginx -t` + reload)."""
    gw = gateway.Gateway(config.GatewayConfig(**ng.gateway_config()))
    out: dict[str, list[float]] = {"bare": [], "ernie-ops": []}
    target = a
    with httpx.Client() as client:
        for i in range(2 * runs):
            target = b if target == a else a
            kind = "bare" if i % 2 == 0 else "ernie-ops"
            text = gateway.render_upstream(target)
            if kind == "bare":
                gw.write_upstream(text)
                t0 = time.perf_counter()
                gw.reload()
            else:
                t0 = time.perf_counter()
                gw.switch(target)  # its own write, nginx -t, reload
            while not client.get(f"{ng.url}/health").headers.get("x-ernie-upstream", "").endswith(f":{target}"):
                time.sleep(0.002)
            out[kind].append(time.perf_counter() - t0)
            time.sleep(0.5)
    return out


def main() -> None:
    model = tiny_model.cached(CACHE / "models")
    with tempfile.TemporaryDirectory(prefix="eo-race-", dir="/var/tmp") as d:
        work = Path(d)
        port, port2 = free_port(), free_port()
        cfg = write_config(work / "ernie.yaml", model, [port, port2], work / "cache")
        sp = serve_proc.start(cfg, port, work)
        sp2 = serve_proc.start(cfg, port2, work / "b")
        shipped = nginx.prepare(work / "shipped", free_port(), port)
        keepalive = nginx.prepare(work / "keepalive", free_port(), port, client_keepalive=True)
        try:
            sp.wait_ready()
            sp2.wait_ready()
            shipped.start()
            keepalive.start()
            for name, ng in (("shipped (keepalive_timeout 0)", shipped), ("client keep-alive on (65 s)", keepalive)):
                reloads, ok, failed, errors = race(ng, port)
                print(f"{name:32s}: {reloads} reloads, {ok} ok, {failed} failed {sorted(set(errors))}", flush=True)
            lat = switch_latency(shipped, port, port2)
            for kind, values in lat.items():
                med, lo, hi = (statistics.median(values) * 1000, min(values) * 1000, max(values) * 1000)
                print(f"switch latency {kind:9s} (upstream written -> first answer from the new port), idle, "
                      f"{len(values)} runs: median {med:.0f} ms, min {lo:.0f}, max {hi:.0f}")  # fmt: skip
            ratio = statistics.median(lat["ernie-ops"]) / statistics.median(lat["bare"])
            print(f"ernie-ops switch / bare reload: {ratio:.2f} (goal <= 1.2)")
        finally:
            shipped.stop()
            keepalive.stop()
            sp.stop()
            sp2.stop()


if __name__ == "__main__":
    main()
