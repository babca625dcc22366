#!/usr/bin/env python3
"""A STUB OpenAI completions server that streams as fast as it can: it measures a load generator's
own ceiling (the client must not be the bottleneck), which a real engine on 2 CPU cores cannot.

Usage: python fast_stub.py PORT [TOKENS]   (TOKENS chunks per streamed completion, default 16)
Also answers /health, /v1/models and non-streaming completions, and sets X-Ernie-Upstream.
"""

from __future__ import annotations

import json
import sys

import uvicorn

PORT = int(sys.argv[1])
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 16
HEADERS = [(b"content-type", b"text/event-stream"), (b"x-ernie-upstream", f"127.0.0.1:{PORT}".encode())]


def chunk(i: int, last: bool) -> bytes:
    body = {"id": "cmpl-stub", "object": "text_completion", "model": "stub",
            "choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if last else None}]}  # fmt: skip
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if scope["method"] == "POST":
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        req = json.loads(body or b"{}")
        n = int(req.get("max_tokens") or TOKENS)
        if req.get("stream"):
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            for i in range(n):
                await send({"type": "http.response.body", "body": chunk(i, i == n - 1), "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        out = json.dumps({"choices": [{"index": 0, "text": "stub", "finish_reason": "length"}]}).encode()
    elif path == "/v1/models":
        out = json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode()
    else:
        out = b"{}"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": out})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning", access_log=False, loop="uvloop", http="httptools")
