"""The chat history store against real SQLite files: the shared behaviour checks (tests/harness/
thread_store_contract.py, also run against PostgreSQL by the integration tier), and retention's boundary."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from ernie_ops.threads.errors import HistoryUnavailable
from ernie_ops.threads.retention import apply_retention, keep_applying
from ernie_ops.threads.store import ThreadStore
from tests.harness import thread_store_contract as contract


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_store_on_sqlite(check, tmp_path):
    asyncio.run(contract.run_check(check, f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"))


def test_retention_deletes_only_what_is_idle_for_longer_than_the_days_and_logs_it(tmp_path, caplog):
    async def go():
        clock = contract.Clock()
        now = clock()
        store = await ThreadStore.open(f"sqlite+aiosqlite:///{tmp_path}/history.sqlite", now=clock)
        try:
            for tid, idle in (("just-inside", timedelta(days=30)), ("just-over", timedelta(days=30, seconds=1))):
                clock.t = now - idle
                await store.upsert_thread(tid, user="ann")
            with caplog.at_level("INFO", logger="ernie_ops.threads"):
                assert await apply_retention(store, 30, now) == 1
                assert await apply_retention(store, 30, now) == 0
            assert [t.id for t in (await store.list_threads("ann"))[0]] == ["just-inside"]
            assert caplog.text.count("deleted 1 thread(s) idle for more than 30 day(s)") == 1
        finally:
            await store.close()

    asyncio.run(go())


def test_the_apps_retention_task_deletes_at_once_and_goes_on_through_a_failing_pass(tmp_path):
    """keep_applying, the chat app's background task: a pass at once (an idle thread goes, its owner and id
    handed on for its uploads), a pass whose database cannot be opened is logged and the next one runs."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite'}"
    old = datetime.now(UTC) - timedelta(days=40)

    async def scenario():
        past = await ThreadStore.open(url, now=lambda: old)
        await past.upsert_thread("idle", user="ann")
        await past.close()
        store = await ThreadStore.open(url)
        await store.upsert_thread("fresh", user="ann")
        opens, told = [], []

        async def flaky_store():
            opens.append(1)
            if len(opens) == 1:
                raise HistoryUnavailable("the chat history database could not be opened: connection refused")
            return store

        async def on_deleted(owner, thread_id):
            told.append((owner, thread_id))

        task = asyncio.create_task(keep_applying(flaky_store, 30, on_deleted, interval=0.01))
        for _ in range(500):
            if told:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        ids = [t.id for t in (await store.list_threads("ann"))[0]]
        await store.close()
        return len(opens), told, ids

    opened, told, ids = asyncio.run(scenario())
    assert opened >= 2 and told == [("ann", "idle")] and ids == ["fresh"]
