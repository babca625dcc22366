"""`chat.history.retention_days`: threads idle for longer are deleted with their messages, files and feedback.

The chat app calls `apply_retention` at start and once a day while it runs; null keeps every thread.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ernie_ops.threads.store import ThreadStore

log = logging.getLogger("ernie_ops.threads")

RETENTION_INTERVAL_SECONDS = 86400  # how often the app applies it while running


def cutoff(retention_days: int, now: datetime) -> datetime:
    """Threads whose last activity is before this go."""
    return now - timedelta(days=retention_days)


async def apply_retention(store: ThreadStore, retention_days: int | None, now: datetime) -> int:
    """Delete the threads with no activity for `retention_days` before `now`; returns how many (0 when None)."""
    if retention_days is None:
        return 0
    deleted = await store.delete_older_than(cutoff(retention_days, now))
    if deleted:
        log.info("chat history: deleted %d thread(s) idle for more than %d day(s) (chat.history.retention_days)", deleted, retention_days)
    return deleted
