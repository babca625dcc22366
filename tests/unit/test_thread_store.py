"""The chat history store against real SQLite files: the shared behaviour checks (tests/harness/
thread_store_contract.py, also run against PostgreSQL by the integration tier)."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import thread_store_contract as contract


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_store_on_sqlite(check, tmp_path):
    asyncio.run(contract.run_check(check, f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"))
