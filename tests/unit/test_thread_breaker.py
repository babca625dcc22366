"""The history's circuit breaker (ernie_ops/threads/breaker.py): its transitions on a fake clock, and the store
over a real SQLite file that refuses writes (SQLite's own max_page_count: the file is full for real), whose
calls within the open period do not reach the database at all, and resume after it without a duplicate row."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from ernie_ops.threads.breaker import OPEN_SECONDS, Breaker
from ernie_ops.threads.errors import HistoryError, HistoryUnavailable
from ernie_ops.threads.store import ThreadStore
from tests.harness import sqlite_damage
from tests.harness.thread_store_contract import step


class FakeClock:
    """Monotonic seconds and the wall time shown in messages, moved by the test (milliseconds, not 30 s)."""

    def __init__(self):
        self.seconds = 1000.0
        self.start = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds - 1000.0)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


def refusal(why: str) -> str:
    return f"could not save a message: {why}"


def hms(when: datetime) -> str:
    return when.strftime("%H:%M:%S")


def test_open_refuses_at_once_saying_since_when_and_when_it_tries_again_then_one_trial():
    clock = FakeClock()
    b = Breaker(open_seconds=30, clock=clock, wall=clock.wall)
    assert b.enter(refusal) is False and b.state == "closed"  # closed: every call goes through, none is a trial
    b.failed("could not save a message: timeout")
    began = clock.wall()
    clock.advance(12)
    with pytest.raises(HistoryUnavailable) as caught:
        b.enter(refusal)
    assert str(caught.value) == (
        f"could not save a message: not tried: it fails since {hms(began)} UTC, tried again at "
        f"{hms(began + timedelta(seconds=30))} UTC, in 18 s (last: could not save a message: timeout)"
    )
    clock.advance(17.9)
    with pytest.raises(HistoryUnavailable):
        b.enter(refusal)
    clock.advance(0.1)
    assert b.state == "half-open"
    assert b.enter(refusal) is True  # the one trial
    with pytest.raises(HistoryUnavailable, match=r"another call is trying it now"):
        b.enter(refusal)  # a second call while the trial runs does not wait for the database either


def test_a_failed_trial_opens_it_again_and_a_successful_one_closes_it():
    clock = FakeClock()
    b = Breaker(open_seconds=30, clock=clock, wall=clock.wall)
    b.failed("could not save a message: timeout")
    first = clock.wall()
    clock.advance(30)
    assert b.enter(refusal) is True
    b.failed("could not save a message: connection refused")
    clock.advance(29)
    with pytest.raises(HistoryUnavailable) as caught:
        b.enter(refusal)
    assert f"it fails since {hms(first)} UTC" in str(caught.value)  # the outage's start, not the last failure's
    assert "in 1 s (last: could not save a message: connection refused)" in str(caught.value)
    clock.advance(1)
    assert b.enter(refusal) is True
    b.succeeded()
    assert b.state == "closed" and b.enter(refusal) is False and b.enter(refusal) is False


def test_a_cancelled_trial_gives_its_turn_to_the_next_call():
    clock = FakeClock()
    b = Breaker(open_seconds=30, clock=clock, wall=clock.wall)
    b.failed("could not save a message: timeout")
    clock.advance(31)
    assert b.enter(refusal) is True
    b.leave(True)
    assert b.enter(refusal) is True


def test_the_default_open_period_is_the_documented_one():
    assert Breaker().open_seconds == OPEN_SECONDS == 30.0


def _capped_store_setup(store: ThreadStore, limit: dict, statements: list) -> None:
    sqlite_damage.cap_pages(store.engine.sync_engine, limit)

    @event.listens_for(store.engine.sync_engine, "before_cursor_execute")
    def _count(conn, cursor, statement, *args):
        statements.append(statement)


def test_the_store_fails_at_once_within_the_open_period_and_resumes_after_it_without_duplicates(tmp_path):
    path = tmp_path / "history.sqlite"
    clock = FakeClock()
    limit = {"pages": 0}  # 0: no limit; SQLite's max_page_count makes the file full for real
    statements: list[str] = []

    async def go():
        store = await ThreadStore.open(f"sqlite+aiosqlite:///{path}", breaker=Breaker(open_seconds=30, clock=clock, wall=clock.wall))
        try:
            _capped_store_setup(store, limit, statements)
            await store.upsert_step(step("s1", "t1", "2000-01-01T00:00:00Z", output="before"))
            conn = sqlite3.connect(path)
            limit["pages"] = conn.execute("PRAGMA page_count").fetchone()[0] + 2
            conn.close()
            await store.engine.dispose()  # new connections, capped
            with pytest.raises(HistoryUnavailable, match="could not save a file or element: database or disk is full"):
                await store.upsert_element({"id": "e1", "threadId": "t1", "name": "big.pdf"}, b"\0" * 200_000)
            limit["pages"] = 0  # the disk has room again, but the breaker is open: nothing is tried for 30 s
            await store.engine.dispose()
            statements.clear()
            for _ in range(10):
                with pytest.raises(HistoryUnavailable) as caught:
                    await store.upsert_step(step("s2", "t1", "2000-01-01T00:00:01Z", output="during"))
            assert re.fullmatch(
                rf"the chat history database {re.escape(str(path))} could not save a message: not tried: it fails since "
                r"\d\d:\d\d:\d\d UTC, tried again at \d\d:\d\d:\d\d UTC, in 30 s \(last: could not save a file or element: "
                r"database or disk is full\)",
                str(caught.value),
            ), str(caught.value)
            with pytest.raises(HistoryUnavailable, match="could not read a thread's messages: not tried"):
                await store.steps("t1")
            assert statements == []  # not one statement reached the database within the open period
            clock.advance(30)
            await store.upsert_step(step("s2", "t1", "2000-01-01T00:00:01Z", output="after"))  # the trial: closes it
            await store.upsert_step(step("s2", "t1", "2000-01-01T00:00:01Z", output="after"))  # the chat's update of it
            await store.upsert_element({"id": "e1", "threadId": "t1", "name": "big.pdf"}, b"\0" * 200_000)
            assert [(s["id"], s["output"]) for s in await store.steps("t1")] == [("s1", "before"), ("s2", "after")]
            assert [e["id"] for e in await store.elements("t1")] == ["e1"]
            assert store.breaker.state == "closed"
        finally:
            await store.close()

    asyncio.run(go())


def test_an_answer_from_the_database_is_not_a_failure(tmp_path):
    """An unknown step's feedback is refused by a working database: the breaker stays closed."""

    async def go():
        store = await ThreadStore.open(f"sqlite+aiosqlite:///{tmp_path / 'history.sqlite'}")
        try:
            with pytest.raises(HistoryError, match="no message nope"):
                await store.upsert_feedback(feedback_id=None, step_id="nope", value=1, comment=None)
            assert store.breaker.state == "closed"
            await store.upsert_step(step("s1", "t1", "2000-01-01T00:00:00Z"))
        finally:
            await store.close()

    asyncio.run(go())


def test_stores_opened_again_with_one_breaker_do_not_try_while_it_is_open(tmp_path):
    """The chat app opens its store again after a failed open: with the app's breaker, that fails at once too."""
    state = tmp_path / "state"
    clock = FakeClock()
    breaker = Breaker(open_seconds=30, clock=clock, wall=clock.wall)
    breaker.failed("could not be opened (connect, then create or migrate its schema): timeout")

    async def go():
        with pytest.raises(HistoryUnavailable, match=r"could not be opened .*: not tried: it fails since"):
            await ThreadStore.open(f"sqlite+aiosqlite:///{state / 'history.sqlite'}", breaker=breaker)
        clock.advance(30)
        store = await ThreadStore.open(f"sqlite+aiosqlite:///{state / 'history.sqlite'}", breaker=breaker)
        await store.close()
        assert breaker.state == "closed"

    asyncio.run(go())
