"""The chat history store's behaviour, written once for every backend: each `check_*(store, clock)` is run by
tests/unit/test_thread_store.py against SQLite files and by the integration tier against a real PostgreSQL
(`run_check(check, url)` on an empty database; `empty(store)` clears one between checks).

`clock` is the store's injected clock (`Clock`): aware UTC, starting at the real now and moved only by
`advance`, so "40 days idle" is 40 days before the time the test runs, never a calendar date.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ernie_ops.threads import schema
from ernie_ops.threads.retention import apply_retention
from ernie_ops.threads.store import HistoryError, ThreadStore


class Clock:
    """A settable clock for the store: `clock()` is now; `advance(days=1)` moves it."""

    def __init__(self, start: datetime | None = None):
        self.t = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **delta: float) -> datetime:
        self.t += timedelta(**delta)
        return self.t


Check = Callable[[ThreadStore, Clock], Awaitable[None]]


async def run_check(check: Check, url: str) -> None:
    clock = Clock()
    store = await ThreadStore.open(url, now=clock)
    try:
        await check(store, clock)
    finally:
        await store.close()


async def empty(store: ThreadStore) -> None:
    """Every row gone (the schema kept): a PostgreSQL database reused between checks."""
    async with store.engine.begin() as conn:
        for table in (schema.feedback, schema.elements, schema.steps, schema.threads, schema.users):
            await conn.execute(sa.delete(table))


async def count(store: ThreadStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()


def step(step_id: str, thread_id: str, created: str, type_: str = "assistant_message", output: str = "", **more) -> dict:
    return {"id": step_id, "threadId": thread_id, "type": type_, "name": "ERNIE", "output": output, "createdAt": created, **more}


def iso(clock: Clock, seconds: float = 0) -> str:
    """A createdAt as Chainlit writes it (ISO 8601, UTC, 'Z'), `seconds` after the clock's now."""
    return (clock() + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


async def check_same_step_twice_is_one_row_and_an_update_merges(store: ThreadStore, clock: Clock) -> None:
    s = step("s1", "t1", iso(clock), output="first", metadata={"a": 1})
    await store.upsert_step(s)
    await store.upsert_step(s)
    assert await count(store, schema.steps) == 1
    await store.upsert_step({"id": "s1", "output": "second", "isError": False})  # update_step sends fewer keys
    [stored] = await store.steps("t1")
    assert stored["output"] == "second" and stored["metadata"] == {"a": 1} and stored["isError"] is False
    assert stored["name"] == "ERNIE" and stored["threadId"] == "t1"
    # an id copied from another thread (another user's, issue 34): refused, and neither thread changes
    with pytest.raises(HistoryError, match="step s1 belongs to another thread than elsewhere; not written"):
        await store.upsert_step({"id": "s1", "threadId": "elsewhere", "output": "third"})
    assert await store.steps("elsewhere") == [] and (await store.steps("t1"))[0]["output"] == "second"


async def check_the_same_new_step_saved_at_once_by_many_tasks_is_one_merged_row(store: ThreadStore, clock: Clock) -> None:
    base = step("s1", "t1", iso(clock))
    await asyncio.gather(*(store.upsert_step({**base, f"key{i}": i}) for i in range(8)))
    await asyncio.gather(*(store.upsert_element({"id": "e1", "threadId": "t1", f"k{i}": i}, b"x") for i in range(8)))
    [stored] = await store.steps("t1")
    assert {k: stored[k] for k in stored if k.startswith("key")} == {f"key{i}": i for i in range(8)}
    [element] = await store.elements("t1")
    assert {k for k in element if k.startswith("k")} == {f"k{i}" for i in range(8)}
    assert (await count(store, schema.steps), await count(store, schema.elements), await count(store, schema.threads)) == (1, 1, 1)


async def check_a_step_saved_before_its_thread_creates_the_thread(store: ThreadStore, clock: Clock) -> None:
    await store.upsert_step(step("s1", "t1", iso(clock)))
    thread = await store.get_thread("t1")
    assert thread is not None and thread.user is None and thread.created_at == clock()
    await store.upsert_thread("t1", user="ann", name="Hello")
    assert (await store.get_thread("t1")).user == "ann"


async def check_steps_come_by_created_at_then_insertion_order(store: ThreadStore, clock: Clock) -> None:
    await store.upsert_step(step("late", "t1", iso(clock, 10)))
    await store.upsert_step(step("tie-a", "t1", iso(clock, 5)))
    await store.upsert_step(step("early", "t1", iso(clock, 1)))
    await store.upsert_step(step("tie-b", "t1", iso(clock, 5)))
    await store.upsert_step({"id": "tie-a", "output": "edited"})  # an update keeps its place
    assert [s["id"] for s in await store.steps("t1")] == ["early", "tie-a", "tie-b", "late"]


async def check_thread_metadata_merges_tags_replace_and_the_owner_never_changes(store: ThreadStore, clock: Clock) -> None:
    await store.upsert_thread("t1", user="ann", name="一", metadata={"chat_profile": "Docs", "x": 1}, tags=["a"])
    await store.upsert_thread("t1", user="bob", metadata={"x": 2}, tags=["b"])
    t = await store.get_thread("t1")
    assert (t.user, t.name, t.metadata, t.tags) == ("ann", "一", {"chat_profile": "Docs", "x": 2}, ["b"])
    assert await store.thread_user("t1") == "ann" and await store.thread_user("nope") is None
    assert await store.get_thread("nope") is None


async def check_a_thread_is_named_once_generic_names_give_way_and_a_chosen_name_stays(store: ThreadStore, clock: Clock) -> None:
    generic = ["营销文案 / Marketing copy"]
    assert await store.name_thread("t1", "营销文案 / Marketing copy", user="ann")  # a new thread: created and named
    assert await store.name_thread("t1", "保温杯 T2 · 营销文案", replacing=generic)  # the generic name gives way
    assert not await store.name_thread("t1", "营销文案 / Marketing copy")  # only an unnamed thread takes it
    t = await store.get_thread("t1")
    assert (t.user, t.name) == ("ann", "保温杯 T2 · 营销文案")
    await store.upsert_thread("t1", name="我的文案")  # renamed in the sidebar
    assert not await store.name_thread("t1", "水杯 · 营销文案", replacing=generic)
    assert (await store.get_thread("t1")).name == "我的文案"


async def check_every_write_moves_the_threads_last_activity(store: ThreadStore, clock: Clock) -> None:
    await store.upsert_thread("t1", user="ann")
    created = clock()
    writes = [
        lambda: store.upsert_step(step("s1", "t1", iso(clock))),
        lambda: store.upsert_step({"id": "s1", "output": "more"}),
        lambda: store.upsert_element({"id": "e1", "threadId": "t1", "forId": "s1", "name": "a.txt"}, b"x"),
        lambda: store.upsert_feedback(feedback_id="f1", step_id="s1", value=1, comment=None),
        lambda: store.delete_feedback("f1"),
        lambda: store.delete_element("e1"),
        lambda: store.delete_step("s1"),
        lambda: store.upsert_thread("t1", name="renamed"),
    ]
    for write in writes:
        before = clock.advance(minutes=1)
        await write()
        t = await store.get_thread("t1")
        assert t.updated_at == before and t.created_at == created


async def check_users_are_upserted_by_identifier(store: ThreadStore, clock: Clock) -> None:
    assert await store.get_user("ann") is None
    first = await store.upsert_user("ann", {"role": "user"})
    clock.advance(hours=1)
    again = await store.upsert_user("ann", {"role": "admin"})
    assert (again.id, again.created_at, again.metadata) == (first.id, first.created_at, {"role": "admin"})
    assert await store.get_user("ann") == again
    assert await store.delete_user("ann") and await store.get_user("ann") is None and not await store.delete_user("ann")


async def check_a_user_lists_only_their_threads_newest_activity_first(store: ThreadStore, clock: Clock) -> None:
    for name in ("old", "mid", "new"):
        clock.advance(minutes=1)
        await store.upsert_thread(f"ann-{name}", user="ann", name=name)
    await store.upsert_thread("bob-1", user="bob", name="bob's")
    await store.upsert_step(step("s1", "t-nobody", iso(clock)))  # no owner yet: nobody's list
    clock.advance(minutes=1)
    await store.upsert_step(step("s2", "ann-old", iso(clock)))  # activity brings it to the top
    threads, cursor = await store.list_threads("ann")
    assert [t.id for t in threads] == ["ann-old", "ann-new", "ann-mid"] and cursor is None
    assert [t.id for t in (await store.list_threads("bob"))[0]] == ["bob-1"]
    assert (await store.list_threads("carol"))[0] == []


async def check_search_finds_names_in_any_case_and_takes_wildcards_literally(store: ThreadStore, clock: Clock) -> None:
    for i, name in enumerate(("Quarterly Report", "报销流程 question", "100% done", "1000 done", None)):
        clock.advance(seconds=1)
        await store.upsert_thread(f"t{i}", user="ann", name=name)
    await store.upsert_thread("bob", user="bob", name="quarterly plans")

    async def found(text: str) -> list[str]:
        return [t.id for t in (await store.list_threads("ann", search=text))[0]]

    assert await found("QUARTERLY") == ["t0"]
    assert await found("报销") == ["t1"]
    assert await found("100%") == ["t2"]
    assert await found("_") == [] and await found("nothing") == []


async def check_the_cursor_pages_through_every_thread_once(store: ThreadStore, clock: Clock) -> None:
    for i in range(25):
        if i % 3:
            clock.advance(seconds=1)  # some threads share an updated_at: the id breaks the tie
        await store.upsert_thread(f"t{i:02}", user="ann")
    await store.upsert_thread("bob", user="bob")
    seen: list[str] = []
    pages = []
    cursor = None
    while True:
        threads, cursor = await store.list_threads("ann", limit=10, cursor=cursor)
        pages.append(len(threads))
        seen += [t.id for t in threads]
        if cursor is None:
            break
    assert pages == [10, 10, 5] and sorted(seen) == [f"t{i:02}" for i in range(25)] and len(set(seen)) == 25
    everything = [t.id for t in (await store.list_threads("ann", limit=100))[0]]
    assert seen == everything
    for bad in ("not-a-cursor", "bm9wZQ=="):
        try:
            await store.list_threads("ann", cursor=bad)
        except HistoryError as exc:
            assert "cursor" in str(exc)
        else:
            raise AssertionError(f"cursor {bad!r} accepted")


async def _thread_with_everything(store: ThreadStore, clock: Clock, thread_id: str, user: str) -> None:
    await store.upsert_thread(thread_id, user=user, name=f"{user}'s")
    await store.upsert_step(step(f"{thread_id}-q", thread_id, iso(clock), "user_message", "question"))
    await store.upsert_step(step(f"{thread_id}-a", thread_id, iso(clock, 1), output="answer"))
    upload = {"id": f"{thread_id}-e", "threadId": thread_id, "forId": f"{thread_id}-q", "name": "a.pdf"}
    await store.upsert_element(upload, b"%PDF-1.4 " * 100)
    await store.upsert_feedback(feedback_id=None, step_id=f"{thread_id}-a", value=0, comment="wrong")


async def check_deleting_a_thread_removes_its_steps_elements_bytes_and_feedback(store: ThreadStore, clock: Clock) -> None:
    await _thread_with_everything(store, clock, "t1", "ann")
    await _thread_with_everything(store, clock, "t2", "ann")
    await store.delete_thread("t1")
    await store.delete_thread("t1")  # twice: nothing left to delete, no error
    assert await store.get_thread("t1") is None and await store.steps("t1") == [] and await store.elements("t1") == []
    assert await store.element_content("t1", "t1-e") is None
    for table in (schema.steps, schema.elements, schema.feedback):
        assert await count(store, table) == (2 if table is schema.steps else 1), table.name
    assert len(await store.steps("t2")) == 2 and await store.element_content("t2", "t2-e") == b"%PDF-1.4 " * 100


async def check_deleting_a_users_threads_leaves_everyone_elses(store: ThreadStore, clock: Clock) -> None:
    for i in range(3):
        await _thread_with_everything(store, clock, f"ann-{i}", "ann")
    await _thread_with_everything(store, clock, "bob-0", "bob")
    assert (await store.count_threads_of("ann"), await store.count_threads_of("bob"), await store.count_threads_of("x")) == (3, 1, 0)
    assert await store.delete_threads_of("ann") == 3
    assert await store.count_threads_of("ann") == 0
    assert await store.delete_threads_of("ann") == 0
    assert (await store.list_threads("ann"))[0] == [] and [t.id for t in (await store.list_threads("bob"))[0]] == ["bob-0"]
    assert await count(store, schema.feedback) == 1 and await count(store, schema.elements) == 1


async def check_a_removed_users_kept_threads_are_no_longer_that_names(store: ThreadStore, clock: Clock) -> None:
    await _thread_with_everything(store, clock, "t1", "a_n")
    await _thread_with_everything(store, clock, "t2", "abn")  # '_' in a LIKE pattern would match this name too
    retired = await store.retire_threads_of("a_n")
    assert retired.startswith("a_n~removed-") and await store.thread_user("t1") == retired
    assert (await store.list_threads("a_n"))[0] == [] and await store.count_threads_of("a_n") == 1
    assert await store.delete_threads_of("a_n") == 1 and await store.thread_user("t2") == "abn"


async def check_a_users_stored_files_are_counted_in_their_own_threads_only(store: ThreadStore, clock: Clock) -> None:
    """The upload quota's measure: the bytes of files in the user's threads, not another's, not an earlier user's of
    that name (retired), not an element without bytes (a card)."""
    assert await store.file_bytes_of("ann") == 0  # nothing stored yet: 0, not None
    await _thread_with_everything(store, clock, "t1", "ann")
    await _thread_with_everything(store, clock, "t2", "ann")
    await store.upsert_element({"id": "t2-card", "threadId": "t2", "forId": "t2-a", "name": "CopyPost"}, None)
    await _thread_with_everything(store, clock, "t3", "bob")
    assert (await store.file_bytes_of("ann"), await store.file_bytes_of("bob")) == (2 * 900, 900)
    await store.retire_threads_of("bob")
    assert await store.file_bytes_of("bob") == 0  # the next "bob" starts with the whole quota
    await store.delete_thread("t1")
    assert await store.file_bytes_of("ann") == 900


async def check_which_of_many_thread_ids_exist_is_one_batch_answer(store: ThreadStore, clock: Clock) -> None:
    assert not await store.has_threads()  # a database with no thread: the upload sweep then drops nothing
    for i in range(3):
        await store.upsert_thread(f"t{i}", user="ann")
    await store.delete_thread("t1")
    asked = [f"t{i}" for i in range(1200)]  # more than one batch of the IN list
    assert await store.existing_threads(asked) == {"t0", "t2"}
    assert await store.existing_threads([]) == set()
    assert await store.has_threads()


async def check_old_threads_go_by_their_last_activity(store: ThreadStore, clock: Clock) -> None:
    clock.t = datetime.now(UTC) - timedelta(days=40)
    await _thread_with_everything(store, clock, "idle", "ann")
    await store.upsert_thread("revived", user="ann")
    clock.advance(days=30)  # 10 days ago
    await store.upsert_step(step("s-new", "revived", iso(clock)))
    await store.upsert_thread("recent", user="bob")
    clock.t = datetime.now(UTC)
    told: list[tuple[str | None, str]] = []

    async def on_deleted(owner: str | None, thread_id: str) -> None:
        told.append((owner, thread_id))

    assert await apply_retention(store, None, clock(), on_deleted) == 0
    assert await apply_retention(store, 30, clock(), on_deleted) == 1
    assert told == [("ann", "idle")]  # the app removes that thread's uploads from the document index
    assert await store.get_thread("idle") is None and await count(store, schema.feedback) == 0
    assert {t.id for t in (await store.list_threads("ann"))[0]} == {"revived"}
    assert await store.delete_older_than(clock() - timedelta(days=5)) == 2
    assert await count(store, schema.threads) == 0


async def check_feedback_comes_with_its_question_answer_and_sources(store: ThreadStore, clock: Clock) -> None:
    clock.advance(days=-10)
    await store.upsert_thread("t1", user="ann", name="报销")
    await store.upsert_step(step("q1", "t1", iso(clock), "user_message", "first question"))
    await store.upsert_step(step("a1", "t1", iso(clock, 1), output="first answer"))
    old = await store.upsert_feedback(feedback_id=None, step_id="a1", value=1, comment=None)
    clock.advance(days=9)  # yesterday
    await store.upsert_step(step("q2", "t1", iso(clock), "user_message", "发票怎么报销?"))
    await store.upsert_step(step("a2", "t1", iso(clock, 1), output="见第三节 [1]"))
    await store.upsert_step(step("tool", "t1", iso(clock, 2), "tool", "not a question"))
    for n in (1, 2):
        source = {"id": f"src{n}", "threadId": "t1", "forId": "a2", "name": f"【{n}】", "type": "text", "display": "side"}
        await store.upsert_element(source, f"**报销制度.pdf p.{n}**\n\n第三节 发票……".encode())
    fid = await store.upsert_feedback(feedback_id=None, step_id="a2", value=1, comment=None)
    clock.advance(hours=1)
    assert await store.upsert_feedback(feedback_id=fid, step_id="a2", value=0, comment="wrong section") == fid  # changed: one row
    since = clock() - timedelta(days=7)
    [row] = await store.feedback_since(since)
    assert (row.id, row.user, row.thread_id, row.thread_name, row.value, row.comment) == (fid, "ann", "t1", "报销", 0, "wrong section")
    assert row.step["output"] == "见第三节 [1]" and row.question["output"] == "发票怎么报销?"
    assert [e["name"] for e in row.elements] == ["【1】", "【2】"] and row.updated_at == clock()
    assert row.texts == {"src1": "**报销制度.pdf p.1**\n\n第三节 发票……", "src2": "**报销制度.pdf p.2**\n\n第三节 发票……"}
    assert [r.id for r in await store.feedback_since(since - timedelta(days=7))] == [old, fid]
    # a rating never moves to another message (someone else's feedback id sent with their own message)
    with pytest.raises(HistoryError, match=f"feedback {fid} rates another message than a1; not written"):
        await store.upsert_feedback(feedback_id=fid, step_id="a1", value=1, comment="moved")
    assert (await store.feedback_since(since))[0].comment == "wrong section" and await store.thread_of("feedback", fid) == "t1"
    assert await store.delete_feedback(fid) and not await store.delete_feedback(fid)
    assert await store.feedback_since(since) == [] and await store.thread_of("feedback", fid) is None
    try:
        await store.upsert_feedback(feedback_id=None, step_id="no-such-step", value=1, comment=None)
    except HistoryError as exc:
        assert "no-such-step" in str(exc)
    else:
        raise AssertionError("feedback on an unknown step accepted")


async def check_deleting_a_step_deletes_its_feedback(store: ThreadStore, clock: Clock) -> None:
    await _thread_with_everything(store, clock, "t1", "ann")
    await store.delete_step("t1-a")
    await store.delete_step("t1-a")
    assert [s["id"] for s in await store.steps("t1")] == ["t1-q"] and await count(store, schema.feedback) == 0


async def check_elements_are_reached_only_through_their_thread(store: ThreadStore, clock: Clock) -> None:
    await _thread_with_everything(store, clock, "ann-t", "ann")
    await _thread_with_everything(store, clock, "bob-t", "bob")
    assert (await store.get_element("ann-t", "ann-t-e"))["name"] == "a.pdf"
    assert await store.get_element("bob-t", "ann-t-e") is None and await store.element_content("bob-t", "ann-t-e") is None
    await store.delete_element("ann-t-e", thread_id="bob-t")  # the wrong thread deletes nothing
    assert await store.element_content("ann-t", "ann-t-e") is not None
    # bob, knowing ann's element id (it is in every link to it), writes it from his own thread: refused, bytes kept
    with pytest.raises(HistoryError, match="element ann-t-e belongs to another thread than bob-t; not written"):
        await store.upsert_element({"id": "ann-t-e", "threadId": "bob-t", "name": "a.pdf"}, b"bob's bytes")
    assert await store.element_content("ann-t", "ann-t-e") == b"%PDF-1.4 " * 100
    assert await store.thread_of("element", "ann-t-e") == "ann-t" and await store.thread_of("element", "nope") is None
    await store.upsert_element({"id": "ann-t-e", "display": "side"}, None)  # update without bytes keeps them
    assert await store.element_content("ann-t", "ann-t-e") == b"%PDF-1.4 " * 100
    assert (await store.get_element("ann-t", "ann-t-e"))["display"] == "side"
    await store.upsert_element({"id": "ann-t-e"}, b"new")
    assert await store.element_content("ann-t", "ann-t-e") == b"new"
    assert [e["id"] for e in await store.elements("ann-t")] == ["ann-t-e"]
    await store.delete_element("ann-t-e")
    assert await store.elements("ann-t") == []


async def check_what_cannot_be_saved_is_refused_with_a_sentence(store: ThreadStore, clock: Clock) -> None:
    for call, words in (
        (lambda: store.upsert_step({"output": "no id"}), "without an id"),
        (lambda: store.upsert_step({"id": "s9", "output": "no thread"}), "no threadId"),
        (lambda: store.upsert_element({"name": "x"}, b""), "without an id"),
        (lambda: store.upsert_element({"id": "e9"}, b""), "no threadId"),
    ):
        try:
            await call()
        except HistoryError as exc:
            assert words in str(exc)
        else:
            raise AssertionError(words)
    assert await count(store, schema.threads) == 0


CHECKS: list[Check] = [
    check_a_users_stored_files_are_counted_in_their_own_threads_only,
    check_same_step_twice_is_one_row_and_an_update_merges,
    check_the_same_new_step_saved_at_once_by_many_tasks_is_one_merged_row,
    check_a_step_saved_before_its_thread_creates_the_thread,
    check_steps_come_by_created_at_then_insertion_order,
    check_thread_metadata_merges_tags_replace_and_the_owner_never_changes,
    check_a_thread_is_named_once_generic_names_give_way_and_a_chosen_name_stays,
    check_every_write_moves_the_threads_last_activity,
    check_users_are_upserted_by_identifier,
    check_a_user_lists_only_their_threads_newest_activity_first,
    check_search_finds_names_in_any_case_and_takes_wildcards_literally,
    check_the_cursor_pages_through_every_thread_once,
    check_deleting_a_thread_removes_its_steps_elements_bytes_and_feedback,
    check_deleting_a_users_threads_leaves_everyone_elses,
    check_which_of_many_thread_ids_exist_is_one_batch_answer,
    check_old_threads_go_by_their_last_activity,
    check_feedback_comes_with_its_question_answer_and_sources,
    check_deleting_a_step_deletes_its_feedback,
    check_a_removed_users_kept_threads_are_no_longer_that_names,
    check_elements_are_reached_only_through_their_thread,
    check_what_cannot_be_saved_is_refused_with_a_sentence,
]
