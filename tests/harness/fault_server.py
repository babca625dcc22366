"""A STUB HTTP server that injects faults real vLLM and nginx cannot produce on demand, one per connection.

Each accepted connection takes the next behaviour from a script (the last one repeats):
  reset       read the request, then close with a TCP RST before any response byte (the reload race)
  500         answer HTTP 500 with a JSON error
  cut         HTTP 200 SSE: a few chunks, then close mid-stream (no [DONE], chunked body unfinished)
  error-event HTTP 200 SSE: a chunk, then vLLM's in-stream error event, then [DONE]
  stall       HTTP 200 SSE: one chunk, then silence (a read time-out mid-stream)
  hang        read the request, never answer (a read time-out before the response head)
  ok          a complete SSE reply of `TOKENS` chunks and [DONE]
Runs on 127.0.0.1 in a thread with its own event loop; `stop()` closes it. Counts connections.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading

TOKENS = 5


def _chunk(text: str, finish: str | None = None) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    data = f"data: {json.dumps(body)}\n\n".encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-ernie-upstream: stub\r\n\r\n"
_DONE = b"data: [DONE]\n\n"
_END = f"{len(_DONE):x}\r\n".encode() + _DONE + b"\r\n0\r\n\r\n"


class FaultServer:
    def __init__(self, script: list[str]):
        self.script = list(script)
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()  # handlers still stalling or hanging

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.script[min(self.connections, len(self.script) - 1)]
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
            await reader.readexactly(length)
            await getattr(self, "_" + mode.replace("-", "_"))(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _reset(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        writer.transport.abort()

    async def _500(self, writer: asyncio.StreamWriter) -> None:
        body = b'{"error":{"message":"EngineCore encountered an issue","type":"InternalServerError"}}'
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n")
        writer.write(f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        await writer.drain()

    async def _cut(self, writer: asyncio.StreamWriter) -> None:
        writer.write(_SSE_HEAD + b"".join(_chunk(f" t{i}") for i in range(3)))
        await writer.drain()
        await asyncio.sleep(0.2)
        await self._reset(writer)

    async def _error_event(self, writer: asyncio.StreamWriter) -> None:
        err = b'data: {"error": {"message": "engine aborted the request", "code": 500}}\n\n'
        writer.write(_SSE_HEAD + _chunk(" t0") + f"{len(err):x}\r\n".encode() + err + b"\r\n" + _END)
        await writer.drain()

    async def _stall(self, writer: asyncio.StreamWriter) -> None:
        writer.write(_SSE_HEAD + _chunk(" t0"))
        await writer.drain()
        await asyncio.sleep(30)

    async def _hang(self, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async def _ok(self, writer: asyncio.StreamWriter) -> None:
        writer.write(_SSE_HEAD + b"".join(_chunk(f" t{i}", "stop" if i == TOKENS - 1 else None) for i in range(TOKENS)) + _END)
        await writer.drain()
