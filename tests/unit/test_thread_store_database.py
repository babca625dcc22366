"""The history database's life outside the store's behaviour: schema created and versioned from an empty
file, a newer schema or another program's database refused untouched, a damaged SQLite file kept aside and a
fresh one started, a database that fails in use turned into HistoryUnavailable, two writers on one file."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
from pathlib import Path

import pytest

from ernie_ops.errors import ErnieOpsError
from ernie_ops.threads import database, schema
from ernie_ops.threads.breaker import Breaker
from ernie_ops.threads.store import HistorySchemaError, HistoryUnavailable, ThreadStore
from tests.harness import sqlite_damage
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


def test_a_database_of_the_previous_version_is_migrated_once_at_open_and_keeps_its_data(tmp_path, monkeypatch):
    """The path from the previous schema: a file made at version CURRENT meets an ernie-ops with one migration more
    (here a test migration adding an index: the next real one will be a release's). The open applies it once,
    inside the transaction that records it, and the threads, steps and bytes are all there."""
    path = tmp_path / "history.sqlite"
    run(_fill(path))
    before = raw(path, "SELECT id, user_identifier, name FROM threads ORDER BY id")
    nxt = schema.CURRENT + 1
    applied: list[int] = []

    def add_index(conn) -> None:
        applied.append(nxt)
        conn.exec_driver_sql("CREATE INDEX steps_type_test ON steps (type)")

    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, schema.Migration(nxt, "an index on steps.type", add_index)))
    monkeypatch.setattr(schema, "CURRENT", nxt)

    async def go():
        for _ in range(2):  # the second open finds it current
            store = await ThreadStore.open(url(path))
            assert await store.schema_version() == nxt
            await store.close()

    run(go())
    assert applied == [nxt]
    assert raw(path, "SELECT version FROM schema_version ORDER BY version") == [(v,) for v in range(1, nxt + 1)]
    assert raw(path, "SELECT name FROM sqlite_schema WHERE name = 'steps_type_test'") == [("steps_type_test",)]
    assert raw(path, "SELECT id, user_identifier, name FROM threads ORDER BY id") == before
    assert raw(path, "SELECT count(*) FROM elements WHERE content IS NOT NULL") == [(3,)]


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


@pytest.mark.parametrize("damage", sqlite_damage.KINDS)
def test_a_damaged_file_is_kept_aside_and_a_fresh_history_started(tmp_path, damage, caplog):
    path = tmp_path / "history.sqlite"
    run(_fill(path))
    data = sqlite_damage.damage_file(path, damage)

    async def go():
        store = await ThreadStore.open(url(path))
        try:
            (warning,) = store.warnings
            (aside,) = tmp_path.glob("history.sqlite.corrupt-*")
            assert re.fullmatch(r"history\.sqlite\.corrupt-\d{8}T\d{6}Z", aside.name)
            assert aside.read_bytes() == data
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


@pytest.mark.skipif(os.geteuid() != 0, reason="only root creates files owned by someone else")
def test_files_root_creates_for_the_app_belong_to_the_state_dirs_owner(tmp_path):
    state = tmp_path / "ernie-ops-chat"
    state.mkdir()
    os.chown(state, 4321, 4321)  # the chat app's user, whose state dir it is; the operator runs the CLI as root
    path = state / "history.sqlite"

    async def go():
        store = await ThreadStore.open(url(path))
        await store.close()

    run(go())
    assert {p.name: (p.stat().st_uid, p.stat().st_gid) for p in state.iterdir() if not p.name.endswith(("-wal", "-shm"))} == {
        "history.sqlite": (4321, 4321),
        "history.sqlite.lock": (4321, 4321),
    }


def test_chinese_text_is_stored_as_itself_not_as_escapes(tmp_path):
    path = tmp_path / "history.sqlite"

    async def go():
        store = await ThreadStore.open(url(path))
        await store.upsert_step(step("s1", "t1", "2000-01-01T00:00:00Z", output="发票怎么报销"))
        assert (await store.steps("t1"))[0]["output"] == "发票怎么报销"
        await store.close()

    run(go())
    [(data,)] = raw(path, "SELECT data FROM steps")
    assert "发票怎么报销" in data and "\\u" not in data


def test_a_full_database_refuses_a_write_in_one_sentence_and_writes_resume_without_duplicates(tmp_path):
    path = tmp_path / "history.sqlite"
    limit = {"pages": 0}  # 0: no limit; SQLite's own max_page_count makes the file "full" for real

    async def go():
        # no open period: the write is tried again at once (the breaker's period: test_thread_breaker.py)
        store = await ThreadStore.open(url(path), breaker=Breaker(open_seconds=0))
        try:
            sqlite_damage.cap_pages(store.engine.sync_engine, limit)
            await store.upsert_step(step("s1", "t1", "2000-01-01T00:00:00Z", output="before"))
            limit["pages"] = raw(path, "PRAGMA page_count")[0][0] + 2
            await store.engine.dispose()  # new connections, capped
            with pytest.raises(HistoryUnavailable) as caught:
                await store.upsert_element({"id": "e1", "threadId": "t1", "name": "big.pdf"}, b"\0" * 200_000)
            assert str(caught.value) == f"the chat history database {path} could not save a file or element: database or disk is full"
            limit["pages"] = 0
            await store.engine.dispose()
            await store.upsert_element({"id": "e1", "threadId": "t1", "name": "big.pdf"}, b"\0" * 200_000)
            await store.upsert_element({"id": "e1", "threadId": "t1", "name": "big.pdf"}, b"\0" * 200_000)
            assert [e["id"] for e in await store.elements("t1")] == ["e1"] and len(await store.steps("t1")) == 1
        finally:
            await store.close()

    run(go())


def test_damage_found_in_use_is_history_unavailable_and_the_next_open_keeps_the_file_aside(tmp_path):
    path = tmp_path / "history.sqlite"
    run(_fill(path, threads=20))

    async def go():
        store = await ThreadStore.open(url(path))
        try:
            data = bytearray(path.read_bytes())
            for off in range(4096 * 2, len(data), 4096):  # every page from page 3, while the store has it open
                data[off : off + 4096] = b"\xa5" * 4096
            path.write_bytes(bytes(data))
            await store.engine.dispose()  # no page cached
            with pytest.raises(HistoryUnavailable, match=r"could not read a thread's messages: .*malformed"):
                for i in range(20):
                    await store.steps(f"t{i}")
        finally:
            await store.close()
        again = await ThreadStore.open(url(path))
        try:
            assert len(again.warnings) == 1 and len(list(tmp_path.glob("history.sqlite.corrupt-*"))) == 1
            assert (await again.list_threads("ann"))[0] == []
        finally:
            await again.close()

    run(go())


SNAPSHOT = Path(__file__).parent / "data" / f"history_schema_v{schema.CURRENT}.sqlite.sql"


def _built_schema(tmp_path: Path) -> str:
    path = tmp_path / "history.sqlite"

    async def go():
        store = await ThreadStore.open(url(path))
        await store.close()

    run(go())
    rows = raw(path, "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY name")
    return "".join("\n".join(line.rstrip() for line in sql.strip().splitlines()) + ";\n" for (sql,) in rows)


def test_the_released_schema_never_changes_under_its_version_number(tmp_path):
    """Every chat host's database at version N has exactly these tables: a change to schema.METADATA without
    a new migration fails here (freeze the current tables inside their migration, add migration N+1 that
    alters them, then write the new snapshot: `python -m tests.unit.test_thread_store_database`)."""
    assert _built_schema(tmp_path) == SNAPSHOT.read_text(), f"the tables differ from {SNAPSHOT.name}: see this test's docstring"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        SNAPSHOT.write_text(_built_schema(Path(tmp)))
    print(f"wrote {SNAPSHOT}")


def test_reads_do_not_wait_for_a_writer_and_writes_wait_their_turn(tmp_path):
    path = tmp_path / "history.sqlite"

    async def go():
        store = await ThreadStore.open(url(path))
        try:
            await store.upsert_thread("t1", user="ann", name="before")
            other = sqlite3.connect(path, isolation_level=None)  # another writer (an operator's command) mid-transaction
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE threads SET name = 'uncommitted'")
            started = asyncio.get_running_loop().time()
            assert [t.name for t in (await store.list_threads("ann"))[0]] == ["before"]
            assert await store.steps("t1") == [] and await store.thread_user("t1") == "ann"
            assert asyncio.get_running_loop().time() - started < 2  # not the 10 s busy timeout
            write = asyncio.create_task(store.upsert_thread("t1", name="after"))
            await asyncio.sleep(0.3)
            assert not write.done()  # waits for the other writer ...
            other.execute("COMMIT")
            other.close()
            await write  # ... and goes through once it is done
            assert (await store.get_thread("t1")).name == "after"
        finally:
            await store.close()

    run(go())
