"""The history database's life outside the store's behaviour: schema created and versioned from an empty
file, a newer schema or another program's database refused untouched, a damaged SQLite file kept aside and a
fresh one started, a database that fails in use turned into HistoryUnavailable, two writers on one file."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import pytest

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files import sqlite_file
from ernie_ops.threads import database, schema
from ernie_ops.threads.store import HistorySchemaError, HistoryUnavailable, ThreadStore
from tests.harness.thread_store_contract import step


def url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def raw(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def run(coro):
    return asyncio.run(coro)


async def _fill(path: Path, threads: int = 3) -> None:
    store = await ThreadStore.open(url(path))
    for i in range(threads):
        await store.upsert_thread(f"t{i}", user="ann", name=f"thread {i}")
        await store.upsert_step(step(f"s{i}", f"t{i}", "2000-01-01T00:00:00Z", output="答案 " * 500))
        await store.upsert_element({"id": f"e{i}", "threadId": f"t{i}", "name": "a.bin"}, bytes(range(256)) * 200)
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_migrations_are_numbered_one_after_another_and_current_is_the_last():
    assert [m.version for m in schema.MIGRATIONS] == list(range(1, len(schema.MIGRATIONS) + 1))
    assert schema.MIGRATIONS[-1].version == schema.CURRENT


def test_an_empty_file_gets_every_table_and_the_current_version_once(tmp_path):
    path = tmp_path / "state" / "history.sqlite"  # the directory is created too

    async def go():
        for _ in range(2):  # the second open finds the schema current and changes nothing
            store = await ThreadStore.open(url(path))
            assert await store.schema_version() == schema.CURRENT and store.warnings == []
            await store.close()

    run(go())
    tables = {r[0] for r in raw(path, "SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert tables >= {*schema.TABLES, "schema_version"}
    assert raw(path, "SELECT version FROM schema_version") == [(v,) for v in range(1, schema.CURRENT + 1)]
    assert raw(path, "PRAGMA journal_mode") == [("wal",)]
    assert raw(path, "PRAGMA application_id") == [(database.APPLICATION_ID,)]


def test_a_newer_schema_stops_with_one_sentence_and_the_file_is_left_as_it_is(tmp_path):
    path = tmp_path / "history.sqlite"
    run(_fill(path))
    newer = schema.CURRENT + 1
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, '2099-01-01 00:00:00.000000', 'from a newer ernie-ops')", (newer,))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(HistorySchemaError) as caught:
        run(ThreadStore.open(url(path)))
    message = str(caught.value)
    assert message == (
        f"the chat history database {path} has schema version {newer} and this ernie-ops knows only up to {schema.CURRENT}; "
        "upgrade ernie-ops on this host to the version the other chat hosts run, or point chat.history at another database"
    )
    assert "\n" not in message and isinstance(caught.value, ErnieOpsError)
    assert path.read_bytes() == before and list(tmp_path.glob("*.corrupt-*")) == []


def test_tables_ernie_ops_did_not_make_are_refused(tmp_path):
    path = tmp_path / "history.sqlite"
    database.prepare_sqlite_file(path)  # our application id, then someone's own "threads" table (e.g. Chainlit's)
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE threads ("id" TEXT PRIMARY KEY, "userIdentifier" TEXT)')
    conn.commit()
    conn.close()
    with pytest.raises(HistorySchemaError, match=r"already has tables \(threads\) that ernie-ops did not make; point chat.history at"):
        run(ThreadStore.open(url(path)))
    assert raw(path, "SELECT name FROM sqlite_schema WHERE type = 'table'") == [("threads",)]


def test_a_file_that_is_not_a_history_is_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"chat:\n  history: {}\n")
    with pytest.raises(HistorySchemaError, match=r"notes\.txt is not a SQLite database, so it is not a chat history; move it away"):
        run(ThreadStore.open(url(text)))
    assert text.read_bytes() == b"chat:\n  history: {}\n"
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(HistorySchemaError, match=r"other\.db is a SQLite database of another program, not a chat history"):
        run(ThreadStore.open(url(other)))
    assert raw(other, "SELECT name FROM sqlite_schema") == [("t",)]
    assert list(tmp_path.glob("*.corrupt-*")) == []


@pytest.mark.parametrize("damage", ["pages", "header_then_garbage", "truncated"])
def test_a_damaged_file_is_kept_aside_and_a_fresh_history_started(tmp_path, damage, caplog):
    path = tmp_path / "history.sqlite"
    run(_fill(path))
    data = bytearray(path.read_bytes())
    if damage == "pages":
        for off in range(4096 * 2, len(data), 4096 * 3):
            data[off : off + 4096] = b"\xa5" * 4096
    elif damage == "header_then_garbage":
        data = bytearray(sqlite_file.SQLITE_HEADER + b"\x13\x37" * 3000)
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))

    async def go():
        store = await ThreadStore.open(url(path))
        try:
            (warning,) = store.warnings
            (aside,) = tmp_path.glob("history.sqlite.corrupt-*")
            assert re.fullmatch(r"history\.sqlite\.corrupt-\d{8}T\d{6}Z", aside.name)
            assert aside.read_bytes() == bytes(data)
            assert warning.startswith(f"the chat history {path} was damaged (")
            assert warning.endswith(f"; kept it as {aside} and started an empty history")
            assert warning in caplog.text
            assert (await store.list_threads("ann"))[0] == []
            await store.upsert_thread("new", user="ann")
            assert [t.id for t in (await store.list_threads("ann"))[0]] == ["new"]
        finally:
            await store.close()

    with caplog.at_level("WARNING", logger="ernie_ops.threads"):
        run(go())


def test_a_path_that_cannot_hold_the_file_is_a_sentence(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the directory should be")
    with pytest.raises(HistoryUnavailable, match=r"cannot open the chat history .*state/history\.sqlite: a part of that path is a file"):
        run(ThreadStore.open(url(blocker / "history.sqlite")))


def test_a_database_failing_in_use_is_history_unavailable_not_a_raw_error(tmp_path):
    path = tmp_path / "history.sqlite"

    async def go():
        store = await ThreadStore.open(url(path))
        try:
            await store.upsert_step(step("s1", "t1", "2000-01-01T00:00:00Z"))
            conn = sqlite3.connect(path)  # the table disappears behind the store's back: a real refusal
            conn.execute("DROP TABLE feedback")
            conn.execute("DROP TABLE steps")
            conn.commit()
            conn.close()
            with pytest.raises(HistoryUnavailable) as caught:
                await store.upsert_step(step("s2", "t1", "2000-01-01T00:00:01Z"))
            assert str(caught.value).startswith(f"the chat history database {path} could not save a message: ")
            assert "no such table: steps" in str(caught.value) and "\n" not in str(caught.value)
            with pytest.raises(HistoryUnavailable, match="could not read a thread's messages"):
                await store.steps("t1")
        finally:
            await store.close()

    run(go())


def test_two_stores_writing_one_file_at_once_both_succeed(tmp_path):
    path = tmp_path / "history.sqlite"

    async def go():
        a, b = await ThreadStore.open(url(path)), await ThreadStore.open(url(path))
        try:

            async def writes(store, who):
                for i in range(40):
                    await store.upsert_step(step(f"{who}{i}", f"t-{who}", f"2000-01-01T00:00:{i:02}Z"))

            await asyncio.gather(writes(a, "a"), writes(b, "b"), writes(a, "c"), writes(b, "d"))
            for who in "abcd":
                assert len(await a.steps(f"t-{who}")) == 40
        finally:
            await a.close()
            await b.close()

    run(go())
