"""A pool of two replicas behind the gateway (issue 33): side by side in one run.

Two `ernie-ops serve` instances of SmolLM2-135M (float32), one core each (cores 0 and 1), the shipped nginx site in
front; the load is `ernie-ops bench` (this machine's 2 cores are shared with the client, as in the issue's figure).
1. scaling: one replica through the gateway (today's routed instance) / the pool of two through the gateway / the same
   two replicas driven directly by the client (half the streams each); same load: 8 streams, 64 in / 64 out.
2. least_conn vs round robin through the pool, mixed lengths at once: 4 streams of 16 tokens and 4 of 512.
3. session affinity: 8 conversations of 6 turns (a long system prompt, the history growing), with and without
   X-Session-Id: TTFT of turns 2-6 and the replicas' prefix-cache hit rate (vllm:prefix_cache_hits / queries).
4. kill -9 of a replica's engine under load, the pool watch running: failed requests while it dies and after.
5. a crash of one replica's engine core alone under load (its API server answers 500 until it exits, as after a CUDA
   fault): the gateway's retry rule as shipped (a sent request that fails with an error or a 500 goes to the next
   replica, nginx/ernie-ops/api-proxy.conf) against the rule before it (only a refused connection goes on).

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.pool [SECONDS_PER_PHASE [PHASES]]  (PHASES e.g. 45; all by default)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ernie_ops import config
from ernie_ops.client.gateway import GatewayClient, ReplyStats, Timeouts
from ernie_ops.observe import bench
from ernie_ops.traffic import gateway, pool_watch
from tests.conftest import CACHE, PROJECT, free_port, write_config
from tests.harness import nginx, real_model, serve_proc, throttle

SYSTEM = "You are a helpful assistant for the staff of a company. " * 40  # ~440 tokens shared by every turn


def load(url: str, seconds: float, streams: int, out_tokens: int, prompt_tokens: int = 64) -> bench.BenchReport:
    spec = bench.BenchSpec(url=url, model=real_model.SERVED_NAME, concurrency=streams, duration=seconds, prompt_tokens=prompt_tokens,
                           max_tokens=out_tokens, processes=1)  # fmt: skip
    return bench.run(spec)


def together(*jobs) -> list[bench.BenchReport]:
    """Several loads at once (each in a thread; bench.run forks its own worker)."""
    out: list = [None] * len(jobs)
    threads = [threading.Thread(target=lambda i=i, job=job: out.__setitem__(i, job())) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def counter(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


async def chats(url: str, keyed: bool, conversations: int = 8, turns: int = 6) -> list[float]:
    """TTFT of turns 2..n of `conversations` chats run at once; each turn carries the whole history."""
    client = GatewayClient(url, real_model.SERVED_NAME, Timeouts(read=120))
    ttfts: list[float] = []

    async def one(k: int) -> None:
        messages = [{"role": "system", "content": SYSTEM}]
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Conversation {k}, question {turn}: what should I do on day {turn + 1}?"})
            stats = ReplyStats()
            reply = await client.complete(messages, 32, 0.0, stats, session=f"conv-{k}" if keyed else None)
            messages.append({"role": "assistant", "content": reply})
            if turn > 0 and stats.ttft is not None:
                ttfts.append(stats.ttft)

    try:
        await asyncio.gather(*(one(k) for k in range(conversations)))
    finally:
        await client.aclose()
    return ttfts


SHIPPED_RETRY = re.compile(r"^proxy_next_upstream .*;$", re.M)  # the API's rule (@balanced and @keyed)
REFUSED_ONLY = "proxy_next_upstream error timeout;"  # the rule before: only what was never sent goes on


def retry_rule(ng: nginx.Nginx, rule: str | None) -> str:
    """Set the API's proxy_next_upstream in this nginx's copy of api-proxy.conf (None: as shipped) and reload."""
    shipped = (PROJECT / "nginx" / "ernie-ops" / "api-proxy.conf").read_text()
    line = SHIPPED_RETRY.search(shipped).group(0)
    (ng.prefix / "conf" / "ernie-ops" / "api-proxy.conf").write_text(shipped.replace(line, rule or line, 1))
    ng.reload()
    return (rule or line).strip()


def crash_engine_core(sp: serve_proc.ServeProcess) -> None:
    """SIGKILL of the engine core process alone: its API server sees the engine dead and answers 500 until it exits."""
    for pid in throttle.engine_cores(sp.engine().pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    phases = sys.argv[2] if len(sys.argv) > 2 else "12345"
    model = real_model.cached(CACHE / "models")
    with tempfile.TemporaryDirectory(prefix="eo-pool-", dir="/var/tmp") as d:
        work = Path(d)
        a, b = free_port(), free_port()
        cfg_file = write_config(work / "ernie.yaml", model, [a, b], work / "cache", model={"served_name": real_model.SERVED_NAME},
                                vllm={"dtype": "float32"})  # fmt: skip
        engines = {p: serve_proc.start(cfg_file, p, work) for p in (a, b)}
        ng = nginx.prepare(work / "nginx", free_port(), a)
        try:
            for sp in engines.values():
                sp.wait_ready()
            ng.start()
            gw_cfg = config.GatewayConfig(**ng.gateway_config())
            gw = gateway.Gateway(gw_cfg)

            def route(text: str) -> None:
                gw.write_upstream(text)
                gw.apply()
                time.sleep(1.0)

            if "1" in phases:  # 1. scaling
                route(gateway.render_upstream(a))
                one = load(ng.url, seconds, 8, 64)
                route(gateway.render_pool([a, b]))
                pooled = load(ng.url, seconds, 8, 64)
                direct = together(
                    lambda: load(f"http://127.0.0.1:{a}", seconds, 4, 64), lambda: load(f"http://127.0.0.1:{b}", seconds, 4, 64)
                )
                d_qps, d_tps = sum(r.qps for r in direct), sum(r.output_tokens_per_s for r in direct)
                print("\n1. scaling (8 streams, 64 in / 64 out, SmolLM2 float32, one core a replica)")
                print("| setup | req/s | output tokens/s | vs one replica | failed |")
                print("|---|---|---|---|---|")
                rows = (("one replica through the gateway", one.qps, one.output_tokens_per_s, one.failed),
                        ("pool of 2 through the gateway", pooled.qps, pooled.output_tokens_per_s, pooled.failed),
                        ("the 2 replicas driven directly", d_qps, d_tps, sum(r.failed for r in direct)))  # fmt: skip
                for name, qps, tps, failed in rows:
                    print(f"| {name} | {qps:.2f} | {tps:.0f} | {qps / one.qps:.2f}x | {failed} |")
                print(
                    f"pool through the gateway / direct: {pooled.qps / d_qps:.3f} (goal >= 0.95); the pool's upstreams {pooled.upstreams}"
                )

            if "2" in phases:  # 2. least_conn vs round robin, mixed lengths
                print("\n2. balancing, mixed lengths at once (4 streams of 16 tokens, 4 of 512)")
                print("| balance | short TTFT p50 / p99 ms | short e2e p50 / p99 ms | long TTFT p50 / p99 ms | long e2e p50 / p99 ms |")
                print("|---|---|---|---|---|")
                for balance in ("least_conn", "round_robin"):
                    route(gateway.render_pool([a, b], balance=balance))
                    short, long_ = together(lambda: load(ng.url, seconds, 4, 16), lambda: load(ng.url, seconds, 4, 512))
                    print(f"| {balance} | {ms(short.ttft_p50)} / {ms(short.ttft_p99)} | {ms(short.e2e_p50)} / {ms(short.e2e_p99)} | "
                          f"{ms(long_.ttft_p50)} / {ms(long_.ttft_p99)} | {ms(long_.e2e_p50)} / {ms(long_.e2e_p99)} |")  # fmt: skip

            if "3" in phases:  # 3. session affinity
                route(gateway.render_pool([a, b]))
                print("\n3. session affinity: 8 conversations x 6 turns at once, a ~440-token system prompt")
                print("| requests | TTFT p50 ms (turns 2-6) | TTFT p90 ms | prefix-cache hit rate |")
                print("|---|---|---|---|")
                for keyed in (False, True):
                    hits0 = sum(counter(p, "vllm:prefix_cache_hits_total") for p in (a, b))
                    queries0 = sum(counter(p, "vllm:prefix_cache_queries_total") for p in (a, b))
                    ttfts = asyncio.run(chats(ng.url, keyed))
                    hits = sum(counter(p, "vllm:prefix_cache_hits_total") for p in (a, b)) - hits0
                    queries = sum(counter(p, "vllm:prefix_cache_queries_total") for p in (a, b)) - queries0
                    q = statistics.quantiles(ttfts, n=10)
                    name = "keyed (X-Session-Id)" if keyed else "unkeyed"
                    print(f"| {name} | {statistics.median(ttfts) * 1000:.0f} | {q[8] * 1000:.0f} | {hits / queries:.1%} |")

            if "4" in phases:  # 4. kill -9 of a replica under load, the watch running
                route(gateway.render_pool([a, b]))
                stop = threading.Event()
                lines: list[str] = []
                cfg = config.load(str(cfg_file)).model_copy(update={"gateway": gw_cfg})
                watch = threading.Thread(target=pool_watch.run, args=(cfg, lines.append), kwargs={"stopped": stop.is_set})
                watch.start()
                victim = engines[b]
                running = counter(b, "vllm:num_requests_running")

                def kill_later() -> None:
                    time.sleep(seconds / 3)
                    nonlocal running
                    running = counter(b, "vllm:num_requests_running")
                    os.killpg(os.getpgid(victim.engine().pid), signal.SIGKILL)

                killer = threading.Thread(target=kill_later)
                killer.start()
                during = load(ng.url, seconds, 8, 64)
                killer.join()
                after = load(ng.url, seconds, 8, 64)
                stop.set()
                watch.join()
                print("\n4. kill -9 of one replica's engine under load (8 streams), the pool watch running")
                print(f"in flight on the victim at the kill: {running:.0f}; while it died: {during.ok} ok, {during.failed} failed, "
                      f"{during.cut} cut, {during.retried} retried before the first byte ({during.errors});")  # fmt: skip
                print(f"after: {after.ok} ok, {after.failed} failed (upstreams {after.upstreams})")
                print("the watch: " + "; ".join(lines))
            if "5" in phases:  # 5. an engine core's crash: the retry rule as shipped against the rule before
                print("\n5. one replica's engine core killed under load (8 streams; its API server answers 500 until it exits),")
                print("   the pool watch running: the gateway's retry rule as shipped against the rule before it")
                print("| /v1/ retry rule | in flight on the victim | ok | failed | of which cut mid-stream | errors |")
                print("|---|---|---|---|---|---|")
                for rule in (REFUSED_ONLY, None):
                    victim = engines[b]
                    if victim.proc.poll() is not None:  # phase 4 or the last round killed it: a new one, as systemd would
                        victim.stop()
                        victim = engines[b] = serve_proc.start(cfg_file, b, work)
                        victim.wait_ready()
                    route(gateway.render_pool([a, b]))
                    shown = retry_rule(ng, rule)
                    stop = threading.Event()
                    cfg = config.load(str(cfg_file)).model_copy(update={"gateway": gw_cfg})
                    watch = threading.Thread(target=pool_watch.run, args=(cfg, lambda _line: None), kwargs={"stopped": stop.is_set})
                    watch.start()
                    in_flight = 0.0

                    def crash_later(sp=victim) -> None:
                        time.sleep(seconds / 3)
                        nonlocal in_flight
                        in_flight = counter(b, "vllm:num_requests_running")
                        crash_engine_core(sp)

                    killer = threading.Thread(target=crash_later)
                    killer.start()
                    report = load(ng.url, seconds, 8, 64)
                    killer.join()
                    stop.set()
                    watch.join()
                    print(f"| `{shown}` | {in_flight:.0f} | {report.ok} | {report.failed} | {report.cut} | {report.errors} |")
                retry_rule(ng, None)
        finally:
            ng.stop()
            for sp in engines.values():
                sp.stop()


if __name__ == "__main__":
    main()
