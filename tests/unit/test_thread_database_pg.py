"""PostgreSQL URL handling of the history database that needs no server: asyncpg's timeouts (the server-side
behaviour is in tests/integration/test_thread_store_postgres.py)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from ernie_ops.errors import UsageError
from ernie_ops.threads import database

BASE = "postgresql+asyncpg://ernie:s3cret@db.example:5432/history"


def test_default_timeouts_bound_every_call():
    url, timeouts = database.pg_timeouts(make_url(BASE))
    assert timeouts == {"timeout": database.PG_CONNECT_TIMEOUT_S, "command_timeout": database.PG_COMMAND_TIMEOUT_S}
    assert all(isinstance(v, float) and v > 0 for v in timeouts.values())
    assert url.render_as_string(hide_password=False) == BASE


def test_url_timeouts_become_numbers_and_leave_the_url():
    url, timeouts = database.pg_timeouts(make_url(BASE + "?timeout=2.5&command_timeout=7&ssl=require"))
    assert timeouts == {"timeout": 2.5, "command_timeout": 7.0}
    assert dict(url.query) == {"ssl": "require"}  # asyncpg's other parameters pass through


@pytest.mark.parametrize("bad", ["timeout=soon", "command_timeout=0", "timeout=-1", "timeout=nan", "timeout=1&timeout=2"])
def test_bad_timeout_is_one_sentence_without_the_password(bad):
    with pytest.raises(UsageError) as caught:
        database.pg_timeouts(make_url(f"{BASE}?{bad}"))
    text = str(caught.value)
    assert "not a number of seconds above 0" in text and bad.split("=")[0] in text and "s3cret" not in text
