"""`chat.history.retention_days`: threads idle for longer are deleted with their messages, files and feedback.

The chat app calls `apply_retention` at start and once a day while it runs; null keeps every thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from ernie_ops.errors import ErnieOpsError
from ernie_ops.threads.store import ThreadStore, utc_now

log = logging.getLogger("ernie_ops.threads")

RETENTION_INTERVAL_SECONDS = 86400  # how often the app applies it while running


def cutoff(retention_days: int, now: datetime) -> datetime:
    """Threads whose last activity is before this go."""
    return now - timedelta(days=retention_days)


async def apply_retention(
    store: ThreadStore, retention_days: int | None, now: datetime,
    on_deleted: Callable[[str | None, str], Awaitable[None]] | None = None,
) -> int:  # fmt: skip
    """Delete the threads with no activity for `retention_days` before `now`; returns how many (0 when None).
    `on_deleted(owner, thread_id)` runs for each deleted thread (the chat app removes its uploads from the
    document index there, as the sidebar's delete does)."""
    if retention_days is None:
        return 0
    deleted = await store.delete_idle(cutoff(retention_days, now))
    if deleted:
        log.info(
            "chat history: deleted %d thread(s) idle for more than %d day(s) (chat.history.retention_days)", len(deleted), retention_days
        )
    if on_deleted is not None:
        for owner, thread_id in deleted:
            await on_deleted(owner, thread_id)
    return len(deleted)


async def keep_applying(
    store: Callable[[], Awaitable[ThreadStore]], retention_days: int,
    on_deleted: Callable[[str | None, str], Awaitable[None]] | None = None,
    interval: float = RETENTION_INTERVAL_SECONDS, now: Callable[[], datetime] = utc_now,
) -> None:  # fmt: skip
    """The chat app's retention task: at once, then every `interval` seconds, until cancelled. A database that
    cannot be reached, or a deletion that fails, is logged and tried again at the next pass: the chat goes on."""
    while True:
        try:
            await apply_retention(await store(), retention_days, now(), on_deleted)
        except ErnieOpsError as exc:
            log.warning("chat history: retention (%d days) not applied this time, tried again in %.0f s: %s", retention_days, interval, exc)
        await asyncio.sleep(interval)
