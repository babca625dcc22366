"""The thread store on a real PostgreSQL (Debian's package, started by tests/harness/postgres.py): every behaviour
test the store's unit tests run on SQLite (their bodies live in tests/harness/thread_store_contract.py), here
on a fresh database each, reached over TCP with a password like a chat host reaches the shared server.

Plus the faults only a server has: stopped mid-use, the store raises HistoryUnavailable (an ErnieOpsError,
never a driver error) at once; frozen (SIGSTOP: the TCP port accepts, nothing answers), within the store's
connect/command timeouts; started again, the same store object writes again, and a step upserted before and
after the outage is one row."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from ernie_ops.errors import ErnieOpsError
from ernie_ops.threads.breaker import OPEN_SECONDS, Breaker
from ernie_ops.threads.errors import HistorySchemaError, HistoryUnavailable
from ernie_ops.threads.store import ThreadStore
from tests.harness import postgres, tiers
from tests.harness import thread_store_contract as contract

reason = postgres.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"integration postgresql: {reason}")


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_store_on_postgresql(check, postgres_url):
    asyncio.run(contract.run_check(check, postgres_url))


@pytest.fixture(scope="module")
def own_server():
    """A server of this module's own for the fault tests, which stop and freeze it (0.6 s to make)."""
    pg = postgres.start()
    yield pg
    if pg.running:
        pg.thaw()  # a test that failed while the server was frozen
    postgres.remove(pg)


def iso(seconds_ago: float = 0) -> str:
    """A Chainlit createdAt (ISO 8601 UTC with a Z) `seconds_ago` seconds before now."""
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def step(step_id: str, thread_id: str, output: str, seconds_ago: float) -> dict:
    return {"id": step_id, "threadId": thread_id, "parentId": None, "type": "assistant_message", "name": "Ernie",
            "input": "", "output": output, "createdAt": iso(seconds_ago), "metadata": {}}  # fmt: skip


def rows(pg: postgres.Postgres, database: str, sql: str) -> str:
    """What the server itself holds, read as its superuser: not through the store under test."""
    return pg.psql(sql, database=database).strip()


def assert_unavailable(exc: BaseException, pg: postgres.Postgres) -> None:
    assert isinstance(exc, HistoryUnavailable) and isinstance(exc, ErnieOpsError), repr(exc)
    text = str(exc)
    assert pg.password not in text and quote(pg.password, safe="") not in text, f"the password is in the message: {text}"


async def _until_unavailable(call, bound_s: float) -> tuple[BaseException, float]:
    began = time.monotonic()
    try:
        await asyncio.wait_for(call, bound_s + 30)  # a hang is a failure with a message, not a stuck suite
    except HistoryUnavailable as exc:
        return exc, time.monotonic() - began
    except TimeoutError:
        pytest.fail(f"the store was still waiting after {bound_s + 30:.0f} s (bound {bound_s} s)")
    pytest.fail("the store wrote to a server that is down")


# This test and the frozen one are of the driver's errors and timeouts and of the same store writing again once
# the server is back: their store's breaker has no open period (every call tries the server). The breaker's
# own test: test_a_frozen_server_costs_the_timeout_once_then_calls_fail_at_once_until_the_trial.


def test_server_stopped_then_started_same_store_no_duplicate(own_server):
    pg = own_server
    url = pg.create_database("stopped")

    async def scenario() -> None:
        store = await ThreadStore.open(url, breaker=Breaker(open_seconds=0))  # see above
        try:
            await store.upsert_thread("t-1", user="alice", name="季度计划")
            await store.upsert_step(step("s-1", "t-1", "第一版", 3))
            pg.stop()
            exc, took = await _until_unavailable(store.upsert_step(step("s-1", "t-1", "第二版", 3)), bound_s=5)
            assert_unavailable(exc, pg)
            assert took < 5, f"a stopped server (connection refused) took {took:.1f} s to report"
            exc, _ = await _until_unavailable(store.steps("t-1"), bound_s=5)
            assert_unavailable(exc, pg)
            pg.start()
            await store.upsert_step(step("s-1", "t-1", "第二版", 3))  # what the chat retries once the database is back
            await store.upsert_step(step("s-2", "t-1", "之后", 1))
            got = await store.steps("t-1")
            assert [(s["id"], s["output"]) for s in got] == [("s-1", "第二版"), ("s-2", "之后")]
        finally:
            if not pg.running:
                pg.start()
            await store.close()

    asyncio.run(scenario())
    assert rows(pg, "stopped", "SELECT count(*) FROM steps WHERE id = 's-1'") == "1"
    assert rows(pg, "stopped", "SELECT count(*) FROM threads") == "1"


# Short timeouts for the frozen-server test, through the URL's query as an operator's chat.env may set them
# (the store's defaults: database.PG_CONNECT_TIMEOUT_S, database.PG_COMMAND_TIMEOUT_S).
CONNECT_S, COMMAND_S = 2, 2


def test_server_frozen_reports_within_the_timeouts_then_resumes(own_server):
    """SIGSTOP on the server and its backends: connections are accepted by the kernel and never answered, as
    with a database host that hangs or vanishes without a reset. Without timeouts the call never returns."""
    pg = own_server
    url = pg.create_database("frozen") + f"?timeout={CONNECT_S}&command_timeout={COMMAND_S}"

    async def scenario() -> None:
        store = await ThreadStore.open(url, breaker=Breaker(open_seconds=0))  # as in the stopped server's test
        try:
            await store.upsert_step(step("s-1", "t-1", "冻结前", 2))
            pg.freeze()
            try:
                bound = CONNECT_S + COMMAND_S + 2  # a pooled connection's ping times out, then the new connection's
                exc, took = await _until_unavailable(store.upsert_step(step("s-1", "t-1", "冻结中", 2)), bound_s=bound)
                assert_unavailable(exc, pg)
                assert took < bound, f"a frozen server took {took:.1f} s to report (bound {bound} s)"
            finally:
                pg.thaw()
            await store.upsert_step(step("s-1", "t-1", "解冻后", 2))
            await store.upsert_step(step("s-2", "t-1", "之后", 1))
            assert [(s["id"], s["output"]) for s in await store.steps("t-1")] == [("s-1", "解冻后"), ("s-2", "之后")]
        finally:
            await store.close()

    asyncio.run(scenario())
    assert rows(pg, "frozen", "SELECT count(*) FROM steps WHERE id = 's-1'") == "1"


def _ms(seconds: list[float]) -> str:
    return " ".join(f"{x * 1000:.1f}" for x in seconds)


async def _ten_writes(store: ThreadStore, step_id: str) -> list[float]:
    """Seconds each of 10 consecutive saves of one message took to be refused (the chat saves one per message)."""
    took = []
    for n in range(10):
        began = time.monotonic()
        try:
            await asyncio.wait_for(store.upsert_step(step(step_id, "t-1", f"冻结中 {n}", 2)), CONNECT_S + COMMAND_S + 30)
        except HistoryUnavailable:
            took.append(time.monotonic() - began)
        else:
            pytest.fail("the store wrote to a frozen server")
    return took


def test_a_frozen_server_costs_the_timeout_once_then_calls_fail_at_once_until_the_trial(own_server):
    """The store's breaker (ernie_ops/threads/breaker.py) on a frozen server, 10 consecutive saves: with no open
    period (as before the breaker) each waits for the timeouts; with the default period the first waits, the
    next nine fail at once. Thawed, the server is not tried before the period ends (a fake clock moves it on,
    not 30 s of waiting); then one save is the trial and closes it; one row per message."""
    pg = own_server
    url = pg.create_database("breaker") + f"?timeout={CONNECT_S}&command_timeout={COMMAND_S}"
    clock = {"seconds": 0.0}

    async def scenario() -> tuple[list[float], list[float]]:
        without = await ThreadStore.open(url, breaker=Breaker(open_seconds=0))
        breaker = Breaker(clock=lambda: clock["seconds"])  # the default open period, OPEN_SECONDS
        store = await ThreadStore.open(url, breaker=breaker)
        try:
            await without.upsert_step(step("s-1", "t-1", "冻结前", 3))
            await store.upsert_step(step("s-2", "t-1", "冻结前", 2))
            pg.freeze()
            try:
                before = await _ten_writes(without, "s-1")
                after = await _ten_writes(store, "s-2")
            finally:
                pg.thaw()
            with pytest.raises(HistoryUnavailable, match=r"could not save a message: not tried: it fails since .* UTC, tried again at"):
                await store.upsert_step(step("s-2", "t-1", "解冻后", 2))  # back, but within the open period: not tried
            clock["seconds"] += OPEN_SECONDS
            await store.upsert_step(step("s-2", "t-1", "解冻后", 2))  # the trial
            assert breaker.state == "closed"
            await store.upsert_step(step("s-3", "t-1", "之后", 1))
            got = [(s["id"], s["output"]) for s in await store.steps("t-1")]
            assert got == [("s-1", "冻结前"), ("s-2", "解冻后"), ("s-3", "之后")]
            return before, after
        finally:
            await without.close()
            await store.close()

    before, after = asyncio.run(scenario())
    print(f"\n10 saves, server frozen (timeouts {CONNECT_S} s connect, {COMMAND_S} s command), ms each:")
    print(f"  no breaker:   total {sum(before):.2f} s: {_ms(before)}")
    print(f"  with breaker: total {sum(after):.2f} s: {_ms(after)}")
    assert min(before) > 1.0, before  # each waited for a timeout (seconds)
    assert after[0] > 1.0 and max(after[1:]) < 1.0, after  # the first waited; the rest did not (a millisecond, not seconds)
    assert rows(pg, "breaker", "SELECT count(*) FROM steps WHERE id = 's-2'") == "1"


def test_concurrent_saves_of_one_step_merge_into_one_row(postgres_url):
    """Chainlit saves a message and its updates from separate tasks (create_step, then update_step as the reply
    streams), so on a server with a pool two transactions can save the same new step at once. SQLite takes
    its write lock at BEGIN; PostgreSQL lets both look, find nothing and insert."""

    async def scenario() -> list[dict]:
        store = await ThreadStore.open(postgres_url)
        try:
            await store.upsert_thread("t-1", user="alice")
            saves = []
            for n in range(12):
                first = step(f"s-{n:02}", "t-1", f"回答 {n}", 30 - n)
                del first["input"]  # the two saves carry different keys: both must end up in the row
                saves += [store.upsert_step(first), store.upsert_step({"id": first["id"], "threadId": "t-1", "input": f"问题 {n}"})]
            await asyncio.gather(*saves)
            return await store.steps("t-1")
        finally:
            await store.close()

    got = asyncio.run(scenario())
    assert [(s["id"], s["input"], s["output"]) for s in got] == [(f"s-{n:02}", f"问题 {n}", f"回答 {n}") for n in range(12)]


def test_concurrent_writes_to_one_thread_lose_no_key_and_never_deadlock(postgres_url):
    """Updates of one stored step from many tasks (each adds its own key: none may be merged into a stale copy),
    beside saves of elements and feedback, a step deleted and another thread deleted, all at once."""

    async def scenario() -> tuple[list[dict], list[dict], object]:
        store = await ThreadStore.open(postgres_url)
        try:
            await store.upsert_thread("t-1", user="alice")
            await store.upsert_step(step("s-1", "t-1", "回答", 10))
            await store.upsert_step(step("s-gone", "t-1", "删掉", 5))
            await store.upsert_step(step("s-9", "t-9", "另一个", 5))
            writes = [store.upsert_step({"id": "s-1", "threadId": "t-1", f"k{n}": n}) for n in range(10)]
            writes += [store.upsert_element({"id": f"e-{n}", "threadId": "t-1", "forId": "s-1", "type": "file"}, b"x") for n in range(5)]
            writes += [store.upsert_feedback(feedback_id=None, step_id="s-1", value=0, comment="不对"), store.delete_step("s-gone")]
            writes += [store.delete_thread("t-9")]
            await asyncio.wait_for(asyncio.gather(*writes), 60)
            return await store.steps("t-1"), await store.elements("t-1"), await store.get_thread("t-9")
        finally:
            await store.close()

    got_steps, got_elements, gone = asyncio.run(scenario())
    [s1] = got_steps
    assert {k: s1.get(k) for k in (f"k{n}" for n in range(10))} == {f"k{n}": n for n in range(10)}
    assert sorted(e["id"] for e in got_elements) == [f"e-{n}" for n in range(5)] and gone is None


def test_a_role_that_may_not_create_tables_is_told_what_to_grant(postgres_server):
    """An operator's server: the database made by its owner, the chat's role granted CONNECT only. PostgreSQL 15
    lets only the owner create tables in `public`; the sentence names the role and both ways to fix it."""
    pg = postgres_server
    pg.psql("CREATE DATABASE ops_owned")
    pg.psql(f"GRANT CONNECT ON DATABASE ops_owned TO {postgres.ROLE}")
    with pytest.raises(HistorySchemaError) as caught:
        asyncio.run(ThreadStore.open(pg.url("ops_owned")))
    text = str(caught.value)
    assert f"does not let {postgres.ROLE} create its tables" in text and "permission denied for schema public" in text
    assert f"ALTER DATABASE ops_owned OWNER TO {postgres.ROLE}" in text and "GRANT USAGE, CREATE ON SCHEMA public" in text
    assert pg.password not in text
    pg.psql(f"GRANT USAGE, CREATE ON SCHEMA public TO {postgres.ROLE}", database="ops_owned")  # the second way, as told

    async def after_the_grant() -> int:
        store = await ThreadStore.open(pg.url("ops_owned"))
        try:
            await store.upsert_step(step("s-1", "t-1", "好了", 1))
            return await store.schema_version()
        finally:
            await store.close()

    assert asyncio.run(after_the_grant()) >= 1


def test_two_hosts_opening_an_empty_database_at_once_migrate_it_once(postgres_url, postgres_server):
    async def both() -> list[int]:
        stores = await asyncio.gather(*(ThreadStore.open(postgres_url) for _ in range(3)))
        try:
            return [await s.schema_version() for s in stores]
        finally:
            for s in stores:
                await s.close()

    versions = asyncio.run(both())
    assert len(set(versions)) == 1 and versions[0] >= 1
    database = postgres_url.rsplit("/", 1)[1]
    assert rows(postgres_server, database, "SELECT count(*) FROM schema_version") == str(versions[0])


def test_a_wrong_password_is_refused_by_the_server_in_one_sentence(postgres_server):
    """The server checks the password (scram-sha-256 over TCP, as a shared server does): the store says so
    without repeating either password."""
    pg = postgres_server
    wrong = pg.url().replace(quote(pg.password, safe=""), "not-the-password")
    with pytest.raises(HistoryUnavailable) as caught:
        asyncio.run(ThreadStore.open(wrong))
    assert_unavailable(caught.value, pg)
    assert 'password authentication failed for user "ernie"' in str(caught.value) and "not-the-password" not in str(caught.value)


def test_a_thread_deleted_while_its_steps_are_saved_fails_neither(postgres_url):
    """A user deletes a thread while its reply is still being saved (or retention deletes it): both lock the
    thread's row first, so PostgreSQL aborts neither as a deadlock victim, and a save that waited for the
    delete makes the thread again instead of failing on its foreign key (as SQLite's order gives: the
    later write wins). Any HistoryUnavailable here is what the chat would report as history not saved."""

    async def scenario() -> int:
        store = await ThreadStore.open(postgres_url)
        try:
            for n in range(8):
                await store.upsert_step(step(f"s-{n}", f"t-{n}", "第一版", 10))
                await store.upsert_element({"id": f"e-{n}", "threadId": f"t-{n}", "forId": f"s-{n}", "type": "file"}, b"x")
            writes = []
            for n in range(8):
                writes += [store.upsert_step({"id": f"s-{n}", "threadId": f"t-{n}", "output": "第二版"}), store.delete_thread(f"t-{n}")]
                writes += [store.upsert_element({"id": f"e-{n}", "threadId": f"t-{n}", "display": "inline"}, None)]
            await asyncio.wait_for(asyncio.gather(*writes), 60)
            return len(await store.list_threads("nobody"))
        finally:
            await store.close()

    asyncio.run(scenario())
