"""The one retry-before-first-byte rule, as the chat client and `bench` both use it.

The server is the STUB in tests/harness/fault_server.py: it injects, per connection, faults real vLLM and
nginx do not produce on demand (a reset before any response byte: the reload race; a request never
answered). Client, bench, httpx and aiohttp are the real ones."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from ernie_ops.client.gateway import ChatError, GatewayClient, ReplyStats, Timeouts
from ernie_ops.client.retry import BeforeFirstByte, send_streamed
from ernie_ops.observe import bench
from tests.harness.fault_server import TOKENS, FaultServer


@contextlib.contextmanager
def server(*script: str):
    stub = FaultServer(list(script)).start()
    try:
        yield stub
    finally:
        stub.stop()


def chat(url: str, read: float = 5.0) -> tuple[str | ChatError, ReplyStats]:
    async def go():
        client = GatewayClient(url, "m", Timeouts(connect=2, read=read, reply=30))
        stats = ReplyStats()
        try:
            return await client.complete([{"role": "user", "content": "hi"}], 8, 0, stats), stats
        except ChatError as exc:
            return exc, stats
        finally:
            await client.aclose()

    return asyncio.run(go())


def bench_request(url: str, transport: str, timeout: float = 5.0) -> bench.Record:
    spec = bench.BenchSpec(url=url, model="m", concurrency=1, timeout=timeout, transport=transport)

    async def go():
        async with bench.make_client(spec, 1) as client:
            return await bench._request(client, spec, bench.request_body(spec), {})

    return asyncio.run(go())


def test_send_streamed_sends_again_only_after_a_failure_before_the_first_byte():
    async def go(url: str):
        seen: list[int] = []
        async with httpx.AsyncClient(timeout=5) as http:
            resp = await send_streamed(http, lambda: http.build_request("POST", url, json={}), 2, seen.append)
            await resp.aclose()
        return resp.status_code, seen

    with server("reset", "ok") as stub:
        assert asyncio.run(go(stub.url)) == (200, [1, 2])
        assert stub.connections == 2
    with server("500") as stub:
        assert asyncio.run(go(stub.url)) == (500, [1])  # an answer, even an error, is never sent again


def test_send_streamed_gives_up_after_its_attempts_and_never_retries_a_read_timeout():
    async def go(url: str, attempts: int, read: float = 5):
        async with httpx.AsyncClient(timeout=httpx.Timeout(5, read=read)) as http:
            await send_streamed(http, lambda: http.build_request("POST", url, json={}), attempts)

    with server("reset") as stub:
        with pytest.raises(BeforeFirstByte) as caught:
            asyncio.run(go(stub.url, 3))
        assert (caught.value.attempts, stub.connections) == (3, 3)
        assert isinstance(caught.value.last, httpx.TransportError)
    with server("hang") as stub:
        with pytest.raises(httpx.ReadTimeout):
            asyncio.run(go(stub.url, 2, read=0.3))
        assert stub.connections == 1  # the server may be working on it


def test_the_chat_client_retries_a_reset_once_and_says_so():
    with server("reset", "ok") as stub:
        text, stats = chat(stub.url)
    assert text == "".join(f" t{i}" for i in range(TOKENS))
    assert stats.attempts == 2
    with server("reset") as stub:
        err, stats = chat(stub.url)
        assert stub.connections == 2
    assert isinstance(err, ChatError) and err.kind == "down" and "after one retry" in err.detail
    assert stats.attempts == 2


def test_the_chat_client_never_retries_a_missing_response_head():
    with server("hang") as stub:
        err, stats = chat(stub.url, read=0.3)
        assert stub.connections == 1
    assert isinstance(err, ChatError) and err.kind == "timeout" and "no response head" in err.detail
    assert stats.attempts == 1


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_bench_retries_a_reset_once_and_counts_it_apart(transport):
    with server("reset", "ok") as stub:
        rec = bench_request(stub.url, transport)
    assert (rec.ok, rec.retried, rec.cut, rec.error, rec.tokens) == (True, True, False, None, TOKENS)
    with server("reset") as stub:
        rec = bench_request(stub.url, transport)
        assert stub.connections == 2
    assert (rec.ok, rec.retried) == (False, True)
    assert rec.error is not None and rec.error.startswith("before first byte (after retry): ")
    with server("ok") as stub:
        rec = bench_request(stub.url, transport)
    assert (rec.ok, rec.retried, rec.tokens) == (True, False, TOKENS)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_bench_never_retries_a_missing_response_head(transport):
    with server("hang") as stub:
        rec = bench_request(stub.url, transport, timeout=0.3)
        assert stub.connections == 1
    assert (rec.ok, rec.retried, rec.cut) == (False, False, False)
    assert rec.error in ("ReadTimeout", "PoolTimeout")
