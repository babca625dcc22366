"""Sending a streamed request, retried only when it failed before any response byte arrived.

At an nginx reload a kept-alive connection can be closed just as a request goes out on it: connect
refused or reset, or closed unanswered. Nothing was processed then, so sending again is safe. A read
or pool timeout is not that race (the server may be working on the request) and is never retried;
neither is anything after the response head arrived: the chat client and `bench` both rely on this.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx


class BeforeFirstByte(Exception):
    """Every attempt failed before any response byte; `last` is the last attempt's transport error."""

    def __init__(self, last: httpx.TransportError, attempts: int):
        self.last, self.attempts = last, attempts
        super().__init__(f"{type(last).__name__}: {last} (after {attempts} attempts)")


async def send_streamed(
    http: httpx.AsyncClient,
    build: Callable[[], httpx.Request],
    attempts: int = 2,
    on_attempt: Callable[[int], None] | None = None,
) -> httpx.Response:
    """The streamed response to `build()`, sent up to `attempts` times while no response byte arrives.

    `on_attempt(n)` is called before attempt n (1-based). httpx.ReadTimeout and httpx.PoolTimeout
    propagate at once; BeforeFirstByte when every attempt failed with another transport error."""
    last: httpx.TransportError | None = None
    for attempt in range(1, attempts + 1):
        if on_attempt is not None:
            on_attempt(attempt)
        try:
            return await http.send(build(), stream=True)
        except (httpx.ReadTimeout, httpx.PoolTimeout):
            raise
        except httpx.TransportError as exc:  # connect refused/reset, closed unanswered: nothing was processed
            last = exc
    assert last is not None, "attempts must be at least 1"
    raise BeforeFirstByte(last, attempts)
