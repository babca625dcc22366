"""Server-sent events from vLLM, split on "\\n" only.

httpx's `aiter_lines()`/`iter_lines()` also split on U+2028 and U+0085, which appear inside
JSON strings of generated text and break the `data:` payload (a U+2028 in a reply
splits one event in two). Bytes are split here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

DONE = "[DONE]"


def _data_lines(buffer: bytearray, chunk: bytes) -> Iterator[str]:
    buffer.extend(chunk)
    while True:
        idx = buffer.find(b"\n")
        if idx < 0:
            return
        line = bytes(buffer[:idx]).rstrip(b"\r")
        del buffer[: idx + 1]
        if line.startswith(b"data:"):
            yield line[5:].strip().decode("utf-8")


def iter_data(chunks: Iterator[bytes]) -> Iterator[str]:
    """`data:` payloads of a byte stream, including the final "[DONE]"."""
    buffer = bytearray()
    for chunk in chunks:
        yield from _data_lines(buffer, chunk)


async def aiter_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    buffer = bytearray()
    async for chunk in chunks:
        for data in _data_lines(buffer, chunk):
            yield data


def parse(data: str) -> dict | None:
    """A chunk's JSON, or None for the "[DONE]" sentinel."""
    return None if data == DONE else json.loads(data)
