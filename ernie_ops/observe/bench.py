"""`ernie-ops bench`: streaming load against the gateway or one instance, with an honest report.

Streaming completions with fixed output length (`ignore_eos`), so every request is the same work.
A request is retried once only when it failed before any response byte (the keep-alive race at
an nginx reload); such retries are counted apart. A stream that started and then broke is
"cut", never retried. Load is spread over worker processes (one event loop each): a single
Python process tops out near one core (~120 req/s with httpx here), below what the server can do.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import ssl
import statistics
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import httpx

from ernie_ops.client import sse
from ernie_ops.client.headers import UPSTREAM_HEADER
from ernie_ops.client.retry import BeforeFirstByte, send_streamed


@dataclass(frozen=True)
class BenchSpec:
    url: str
    model: str
    concurrency: int = 16
    duration: float | None = 30.0
    count: int | None = None
    prompt_tokens: int = 512
    max_tokens: int = 256
    api_key: str | None = None
    processes: int = 0  # 0: one per CPU core, at most one per 8 concurrent streams
    timeout: float = 120.0
    # httpx's API either way; "aiohttp" runs it on aiohttp's connection engine (httpx-aiohttp), which
    # parses a streamed response for a fraction of h11's CPU: the bench must not be the bottleneck.
    transport: str = "aiohttp"
    ca_file: str | None = None  # an https gateway's CA (gateway.ca_file); None: the system's trust store
    # Requests a second in all, evenly spaced (each of the `concurrency` streams waits for its slot); None: each
    # stream sends its next request as soon as one ends. A steady arrival rate is how a service is loaded (vLLM's
    # own benchmark has --request-rate); back to back, even one stream keeps an engine's step loop busy.
    rate: float | None = None

    def worker_count(self) -> int:
        if self.processes:
            return max(1, min(self.processes, self.concurrency))
        return max(1, min(os.cpu_count() or 1, (self.concurrency + 7) // 8))


@dataclass
class Record:
    ok: bool
    start: float
    ttft: float | None = None
    e2e: float | None = None
    tokens: int = 0
    upstream: str = ""
    retried: bool = False
    cut: bool = False
    error: str | None = None


@dataclass
class BenchReport:
    requests: int
    ok: int
    failed: int
    cut: int
    retried: int
    seconds: float
    qps: float
    ttft_mean: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    e2e_p50: float | None
    e2e_p99: float | None
    output_tokens_per_s: float
    upstreams: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    idx = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[idx]


def summarize(records: list[Record], seconds: float) -> BenchReport:
    ok = [r for r in records if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    e2es = [r.e2e for r in ok if r.e2e is not None]
    return BenchReport(
        requests=len(records),
        ok=len(ok),
        failed=len(records) - len(ok),
        cut=sum(r.cut for r in records),
        retried=sum(r.retried for r in records),
        seconds=seconds,
        qps=len(ok) / seconds if seconds > 0 else 0.0,
        ttft_mean=statistics.fmean(ttfts) if ttfts else None,
        ttft_p50=percentile(ttfts, 0.5),
        ttft_p99=percentile(ttfts, 0.99),
        e2e_p50=percentile(e2es, 0.5),
        e2e_p99=percentile(e2es, 0.99),
        output_tokens_per_s=sum(r.tokens for r in ok) / seconds if seconds > 0 else 0.0,
        upstreams=dict(Counter(r.upstream or "?" for r in ok)),
        errors=dict(Counter(r.error for r in records if r.error)),
    )


async def _request(client: httpx.AsyncClient, spec: BenchSpec, body: dict, headers: dict) -> Record:
    rec = Record(ok=False, start=time.perf_counter())

    def attempt(n: int) -> None:  # a retried request is timed from its second sending, and counted apart
        rec.start, rec.retried = time.perf_counter(), n > 1

    try:

        def build() -> httpx.Request:
            return client.build_request("POST", f"{spec.url}/v1/completions", json=body, headers=headers)

        try:
            resp = await send_streamed(client, build, 2, attempt)
        except BeforeFirstByte as exc:
            rec.start, rec.error = time.perf_counter(), f"before first byte (after retry): {type(exc.last).__name__}"
            return rec
        try:
            rec.upstream = resp.headers.get(UPSTREAM_HEADER, "")
            if resp.status_code != 200:
                rec.error = f"HTTP {resp.status_code}"
                return rec
            done = False
            async for data in sse.aiter_data(resp.aiter_raw()):
                if data == sse.DONE:
                    done = True
                    break
                if rec.ttft is None:
                    rec.ttft = time.perf_counter() - rec.start
                rec.tokens += 1
            rec.e2e = time.perf_counter() - rec.start
            rec.ok = done and rec.tokens > 0
            if not rec.ok:
                rec.cut, rec.error = True, "stream ended without [DONE]"
        finally:
            await resp.aclose()
    except httpx.HTTPError as exc:  # a read/pool timeout before the head is never retried: the server may be working on it
        rec.cut = rec.ttft is not None
        rec.error = f"{'cut: ' if rec.cut else ''}{type(exc).__name__}"
    return rec


def request_body(spec: BenchSpec) -> dict:
    return {
        "model": spec.model,
        "prompt": "hi " * max(1, spec.prompt_tokens - 1),
        "max_tokens": spec.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }


def make_client(spec: BenchSpec, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    verify = ssl.create_default_context(cafile=spec.ca_file) if spec.ca_file else True
    if spec.transport == "aiohttp":
        from httpx_aiohttp import HttpxAiohttpClient

        return HttpxAiohttpClient(timeout=spec.timeout, limits=limits, verify=verify)
    return httpx.AsyncClient(timeout=spec.timeout, limits=limits, verify=verify)


async def _worker(spec: BenchSpec, concurrency: int, quota: int | None, deadline: float | None, progress, stop) -> list[Record]:
    body = request_body(spec)
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    records: list[Record] = []
    remaining = [quota]

    def take() -> bool:
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            return False
        if remaining[0] is None:
            return True
        if remaining[0] <= 0:
            return False
        remaining[0] -= 1
        return True

    # this process's share of the rate, its streams' slots interleaved: stream k sends at t0 + (n * streams + k) / rate
    rate = spec.rate * concurrency / spec.concurrency if spec.rate else None
    t0 = time.monotonic()

    async def loop(k: int) -> None:
        n = 0
        while True:
            if rate is not None:
                slot = t0 + (n * concurrency + k) / rate
                n += 1
                if deadline is not None and slot >= deadline:  # decided by the slot, not by when a sleep wakes:
                    break  # asyncio may wake a sleep a clock tick early, which sent one request past the rate (CI)
                wait = slot - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if not take():
                break
            rec = await _request(client, spec, body, headers)
            records.append(rec)
            if progress is not None:
                with progress.get_lock():
                    progress[0 if rec.ok else 1] += 1

    async with make_client(spec, concurrency) as client:
        await asyncio.gather(*(loop(k) for k in range(concurrency)))
    return records


def _run_worker(spec: BenchSpec, concurrency: int, quota: int | None, deadline_in: float | None, progress, stop, out) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop; in-flight requests finish
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    deadline = time.monotonic() + deadline_in if deadline_in is not None else None
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    out.put([asdict(r) for r in runner(_worker(spec, concurrency, quota, deadline, progress, stop))])


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run(spec: BenchSpec, on_progress=None) -> BenchReport:
    """Run the load; `on_progress(ok, failed)` is called about 10 times a second.

    SIGINT/SIGTERM stop issuing new requests; in-flight ones finish and the report covers them all.
    """
    if spec.duration is None and spec.count is None:
        raise ValueError("give a duration or a count")
    n = spec.worker_count()
    conc = _split(spec.concurrency, n)
    quotas = _split(spec.count, n) if spec.count is not None else [None] * n
    ctx = mp.get_context("fork")
    progress = ctx.Array("l", 2)
    out = ctx.Queue()
    stop = ctx.Event()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    t0 = time.perf_counter()
    procs = [
        ctx.Process(target=_run_worker, args=(spec, c, q, spec.duration, progress, stop, out), daemon=True)
        for c, q in zip(conc, quotas, strict=True)
        if c
    ]
    for p in procs:
        p.start()
    results: list[dict] = []
    received = 0
    try:
        while received < len(procs):
            try:
                results.extend(out.get(timeout=0.1))
                received += 1
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and out.empty():
                    break  # a worker died without reporting
            if on_progress is not None:
                on_progress(progress[0], progress[1])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    seconds = time.perf_counter() - t0
    if on_progress is not None:
        on_progress(progress[0], progress[1])
    return summarize([Record(**r) for r in results], seconds)
