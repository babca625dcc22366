"""The chat history store against real SQLite files: the shared behaviour checks (tests/harness/
thread_store_contract.py, also run against PostgreSQL by the integration tier), and retention's boundary."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from ernie_ops.threads.retention import apply_retention
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
