"""SSE is split on "\\n" only: U+2028 / U+0085 inside generated text must not break a JSON payload."""

from __future__ import annotations

import asyncio
import json

from ernie_ops.client import sse


def _stream(texts: list[str]) -> bytes:
    events = [f"data: {json.dumps({'choices': [{'text': t}]}, ensure_ascii=False)}\n\n" for t in texts]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def test_line_separators_inside_json_survive_any_chunking():
    texts = ["a\u2028b", "c\u0085d", "文心\u2029", "plain"]
    raw = _stream(texts)
    for size in (1, 3, 7, 64, len(raw)):
        chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
        payloads = list(sse.iter_data(iter(chunks)))
        assert payloads[-1] == sse.DONE
        assert [sse.parse(p)["choices"][0]["text"] for p in payloads[:-1]] == texts
        assert sse.parse(payloads[-1]) is None


def test_async_reader_matches_and_ignores_comments_and_crlf():
    raw = b': keep-alive\r\ndata: {"x": 1}\r\n\r\nevent: ping\ndata: [DONE]\n'

    async def chunks():
        for b in (raw[:5], raw[5:17], raw[17:]):
            yield b

    async def collect():
        return [d async for d in sse.aiter_data(chunks())]

    assert asyncio.run(collect()) == ['{"x": 1}', "[DONE]"]
