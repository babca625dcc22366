"""A circuit breaker for the history database: once it failed, history calls fail at once for a while.

Why: a database host whose address is black-holed, or a server that is frozen, refuses nothing; every call
waits for asyncpg's connect timeout (10 s) or command timeout (30 s), and Chainlit awaits create_step and
update_step around each message, so every reply of the chat would come that late. After a failure the breaker
is open for `OPEN_SECONDS`: calls raise HistoryUnavailable at once, saying since when the database fails and
when it is tried again. After that ONE call tries the database (half-open; calls made while it runs still fail
at once); its success closes the breaker, its failure opens it again for another period.

Only a failure of the database itself opens it (the store's driver, connection or timeout errors): an unknown
step or a cursor that is not ours is an answer from a working database.

Why not a library: pybreaker's async support is Tornado's (`call_async`), not asyncio; aiobreaker, its asyncio
fork, had its last release in 2021; purgatory (asyncio, kept) reads `time.time()` inside its states (no clock
to inject, and a wall clock that jumps), and when half-open lets every concurrent call through to the database,
which is the wait this breaker exists to avoid. What is needed here is some forty lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ernie_ops.threads.errors import HistoryUnavailable

# Open period. A trial against a server still gone costs one call (one reply) the connect timeout, 10 s (its
# pool is empty by then; the first failure may also wait for a pooled connection's ping, the command timeout).
# Measured with the PostgreSQL harness frozen (tests/integration/test_thread_store_postgres.py, 2 s timeouts):
# 10 saves took 22.1 s without the breaker (each one a timeout), 4.0 s with it (the first 4.0 s, the other nine
# under a millisecond each). 30 s makes an outage cost at most one slow reply in 40 s, while a database that is back is
# used again within 30 s (what is said in those 30 s is not saved, as during the outage).
OPEN_SECONDS = 30.0


class Breaker:
    """Closed, open (since a failure, for `open_seconds`), half-open (one trial call under way).

    `clock`: seconds, monotonic (the period is measured with it); `wall`: the time shown in messages."""

    def __init__(self, open_seconds: float = OPEN_SECONDS, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC)):  # fmt: skip
        self.open_seconds, self.clock, self.wall = open_seconds, clock, wall
        self.opened_at: float | None = None  # clock() of the last failure; None: closed
        self.failing_since: datetime | None = None  # wall time of the first failure of this outage
        self.last_failure = ""
        self.trial = False  # a half-open call is under way

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.trial or self.clock() - self.opened_at >= self.open_seconds:
            return "half-open"
        return "open"

    def enter(self, refusal: Callable[[str], str]) -> bool:
        """Before a call: raises HistoryUnavailable (`refusal(why)`) while open or while another call is the
        trial; returns True when this call is the half-open trial (pass it to `leave`)."""
        if self.opened_at is None:
            return False
        state = self.state
        if state == "half-open" and not self.trial:
            self.trial = True
            return True
        raise HistoryUnavailable(refusal(self._why(state)))

    def succeeded(self) -> None:
        """The database answered: closed."""
        self.opened_at, self.failing_since, self.last_failure, self.trial = None, None, "", False

    def failed(self, reason: str) -> None:
        """The database failed (`reason`: the HistoryUnavailable sentence): open for another period."""
        if self.failing_since is None:
            self.failing_since = self.wall()
        self.opened_at, self.last_failure, self.trial = self.clock(), reason, False

    def leave(self, trial: bool) -> None:
        """After a call that neither succeeded nor failed (cancelled): a trial gives its turn to the next call."""
        if trial:
            self.trial = False

    def _why(self, state: str) -> str:
        since = _hms(self.failing_since)
        if state == "half-open":
            return f"not tried: it fails since {since} UTC and another call is trying it now (last: {self.last_failure})"
        left = max(0.0, self.open_seconds - (self.clock() - self.opened_at))
        retry = _hms(self.wall() + timedelta(seconds=left))
        return f"not tried: it fails since {since} UTC, tried again at {retry} UTC, in {left:.0f} s (last: {self.last_failure})"


def _hms(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%H:%M:%S") if when else "?"
