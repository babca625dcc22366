"""STUB in front of a real vLLM instance: a transparent streaming proxy that answers a chosen share of API
requests with HTTP 500 instead (a fault vLLM cannot produce on demand). Everything else (/health,
/metrics, the other requests, streams token by token) passes through unchanged.

Run as its own process: `python -m tests.harness.fault_proxy LISTEN_PORT UPSTREAM_PORT`; the share of
500s is set at any time with `POST /_fault?share=0.3` and the counts read with `GET /_fault`.
"""

from __future__ import annotations

import random
import sys

import aiohttp
from aiohttp import web

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


def app(upstream: int) -> web.Application:
    state = {"share": 0.0, "served": 0, "failed": 0}
    base = f"http://127.0.0.1:{upstream}"

    async def fault(request: web.Request) -> web.Response:
        if request.method == "POST":
            state["share"] = float(request.query.get("share", "0"))
        return web.json_response(state)

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        streamed = request.path.endswith("completions") and b'"stream": true' in body.replace(b'"stream":true', b'"stream": true')
        if streamed and random.random() < state["share"]:
            state["failed"] += 1
            return web.json_response({"error": {"message": "injected fault (tests/harness/fault_proxy.py)"}}, status=500)
        if streamed:
            state["served"] += 1
        session: aiohttp.ClientSession = request.app["session"]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(request.method, base + request.path_qs, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status, headers={k: v for k, v in up.headers.items() if k.lower() not in HOP})
            await resp.prepare(request)
            try:
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except ConnectionResetError:
                pass  # the client went away (a test's load stopping): nothing to tell it
            return resp

    async def start(a: web.Application) -> None:
        a["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def stop(a: web.Application) -> None:
        await a["session"].close()

    a = web.Application()
    a.on_startup.append(start)
    a.on_cleanup.append(stop)
    a.router.add_route("*", "/_fault", fault)
    a.router.add_route("*", "/{tail:.*}", proxy)
    return a


if __name__ == "__main__":
    listen, upstream = int(sys.argv[1]), int(sys.argv[2])
    web.run_app(app(upstream), host="127.0.0.1", port=listen, print=None, access_log=None)
