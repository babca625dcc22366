"""A TCP relay that delays every byte by a fixed time in each direction: a client "a network away" on loopback
(the kernel's netem qdisc is not available on these machines). Latency only: each chunk leaves `delay` after it
arrived, in order, so a TLS handshake costs its round trips and a stream's tokens arrive `delay` late. The TCP
handshake with the relay itself is local, so the client's first bytes are held one more round trip: a new
connection costs what it costs a network away (SYN, SYN-ACK, then data).

Run as its own process (the relay's event loop must not share a GIL with the clients it measures):
    python -m tests.harness.delay_proxy --listen 127.0.0.1:PORT --to 127.0.0.1:PORT --delay-ms 10
It prints "ready" once it listens; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, not_before: float = 0.0) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            if not data:  # the other side closed: pass the close on, as late as the data
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((max(time.monotonic(), not_before) + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        pass
    finally:  # a connection cut (or the relay stopping): its sender ends with it, awaited, never left pending
        if not sender.done():
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await sender


async def _relay(target: tuple[str, int], delay: float, client_r, client_w) -> None:
    handshake_done = time.monotonic() + 2 * delay  # the SYN / SYN-ACK round trip the local accept skipped
    try:
        server_r, server_w = await asyncio.open_connection(*target)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pump(client_r, server_w, delay, handshake_done), _pump(server_r, client_w, delay), return_exceptions=True)
    for w in (client_w, server_w):
        w.close()


async def serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    server = await asyncio.start_server(lambda r, w: _relay(target, delay, r, w), *listen)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in pending:  # the connections still open: cut them, quietly
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@dataclass
class DelayProxy:
    """The relay as a child process of a test or benchmark; `stop()` it."""

    proc: subprocess.Popen
    port: int

    @classmethod
    def start(cls, port: int, target_port: int, delay_ms: float) -> DelayProxy:
        argv = [sys.executable, "-m", "tests.harness.delay_proxy", "--listen", f"127.0.0.1:{port}",
                "--to", f"127.0.0.1:{target_port}", "--delay-ms", str(delay_ms)]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            raise RuntimeError(f"the delay proxy did not start (exit {proc.wait()})")
        return cls(proc, port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=_address, required=True)
    ap.add_argument("--to", type=_address, required=True)
    ap.add_argument("--delay-ms", type=float, required=True, help="one way; the round trip is twice this")
    args = ap.parse_args()
    asyncio.run(serve(args.listen, args.to, args.delay_ms / 1000))
