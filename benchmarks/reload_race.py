"""The keep-alive race at an nginx reload, measured side by side, same client throughout: 8 threads of the official
openai client (max_retries=0) sending short completions, the gateway switched (upstream rewritten, `nginx -t`,
reload) every 150 ms for 20 s:
  - the gateway as shipped (`keepalive_timeout 0`), plain HTTP: the old way, no client connection kept;
  - the same site file with client keep-alive on (nginx's default 65 s): the race;
  - HTTPS through the edge (nginx/ernie-edge.conf, an nginx of its own, client keep-alive on) in front of the
    gateway's edges' listener (keep-alive too): the way with TLS; also how many requests rode a kept-alive connection.
And the edge's own reloads under the same load: a plain `nginx -s reload` every 150 ms, and one draining reload
(ernie_ops/traffic/edge_reload.py, what `systemctl reload ernie-edge` runs: ~21 s).
Also prints the raw switch latency: upstream written -> first response from the new port, for a bare rewrite +
reload.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.reload_race
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from ernie_ops import config
from ernie_ops.traffic import edge_reload, gateway
from tests.conftest import CACHE, free_port, write_config
from tests.harness import nginx, nonretrying, serve_proc, tiny_model


def race(url: str, switch: Callable[[], object], seconds: float = 20.0, ca: Path | None = None) -> tuple[int, int, int, list[str]]:
    """`switch()` every 150 ms for `seconds` under 8 non-retrying openai clients: (switches, ok, failed, error types)."""
    switches = 0

    def switching() -> None:
        nonlocal switches
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            switch()
            switches += 1
            time.sleep(0.15)

    res = nonretrying.load(url, switching, ca=ca)
    return switches, res["ok"], res["failed"], [e.split("(")[0] for e in res["errors"]]


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
        work.chmod(0o755)  # nginx's workers (user nobody) stat the edge's drain flag under it
        port, port2 = free_port(), free_port()
        cfg = write_config(work / "ernie.yaml", model, [port, port2], work / "cache")
        sp = serve_proc.start(cfg, port, work)
        sp2 = serve_proc.start(cfg, port2, work / "b")
        shipped = nginx.prepare(work / "shipped", free_port(), port)
        keepalive = nginx.prepare(work / "keepalive", free_port(), port, client_keepalive=True)
        edge = nginx.prepare_edge(work / "edge", [f"127.0.0.1:{shipped.edge_port}"], nginx.issue(work / "tls"))
        try:
            sp.wait_ready()
            sp2.wait_ready()
            for ng in (shipped, keepalive, edge):
                ng.start()
            gw_shipped, gw_keepalive = (gateway.Gateway(config.GatewayConfig(**ng.gateway_config())) for ng in (shipped, keepalive))
            host = edge_reload.Host([nginx.NGINX, *edge.args], log=lambda line: None)

            def drain() -> float:
                return edge_reload.reload(host, edge.pid_file, edge.drain_flag)

            cases = [
                ("gateway as shipped (keepalive_timeout 0), HTTP", shipped.url, lambda: gw_shipped.switch(port), 20.0),
                ("gateway with client keep-alive on (65 s), HTTP", keepalive.url, lambda: gw_keepalive.switch(port), 20.0),
                ("HTTPS edge (keep-alive) + gateway as shipped", edge.url, lambda: gw_shipped.switch(port), 20.0),
                ("HTTPS edge, plain edge reloads", edge.url, edge.reload, 20.0),
                ("HTTPS edge, one draining edge reload", edge.url, drain, 1.0),
            ]
            for name, url, switch, seconds in cases:
                mark = len(edge.access_log.read_text().splitlines()) if edge.access_log.exists() else 0
                reloads, ok, failed, errors = race(url, switch, seconds, edge.ca if url == edge.url else None)
                kept = ""
                if url == edge.url:
                    lines = [json.loads(line) for line in edge.access_log.read_text().splitlines()[mark:]]
                    reused = sum(e["connection_requests"] > 1 for e in lines)
                    kept = f", {reused / max(len(lines), 1):.0%} on a kept-alive connection ({len(lines) - reused} on a new one)"
                print(f"{name:48s}: {reloads} reloads, {ok} ok, {failed} failed {sorted(set(errors))}{kept}", flush=True)
            lat = switch_latency(shipped, port, port2)
            for kind, values in lat.items():
                med, lo, hi = (statistics.median(values) * 1000, min(values) * 1000, max(values) * 1000)
                print(f"switch latency {kind:9s} (upstream written -> first answer from the new port), idle, "
                      f"{len(values)} runs: median {med:.0f} ms, min {lo:.0f}, max {hi:.0f}")  # fmt: skip
            ratio = statistics.median(lat["ernie-ops"]) / statistics.median(lat["bare"])
            print(f"ernie-ops switch / bare reload: {ratio:.2f} (goal <= 1.2)")
        finally:
            for ng in (edge, shipped, keepalive):
                ng.stop()
            sp.stop()
            sp2.stop()


if __name__ == "__main__":
    main()
