"""A Docs thread's uploads across chat hosts: two "hosts" are two DocsConfig with their own index files sharing one
history SQLite file. Uploads go in through DocsSession.upload (the app's path) and their element is stored as the
app's data layer stores it; a resume on the other host indexes them from the stored bytes; the sweep drops the
uploads of threads the database no longer has. Real SQLite files, real extraction, no stubs."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ernie_ops.chat import thread_dicts
from ernie_ops.chat.docs_session import DocsSession, Upload
from ernie_ops.chat.upload_restore import NotTheOwner, restore_uploads, stored_uploads, sweep_orphan_uploads
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.store import Index, Scope
from ernie_ops.threads.errors import HistoryUnavailable
from ernie_ops.threads.store import ThreadStore

NOTE = "# 备份\n\n数据库每天凌晨两点备份，备份文件保留十四天。\n"
QUESTION = "数据库几点备份？"


def host(tmp_path: Path, name: str, **values) -> DocsConfig:
    return DocsConfig.model_validate({"index_file": str(tmp_path / name / "index.sqlite"), **values})


def history_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'history.sqlite'}"


async def _message_with_files(store: ThreadStore, thread: str, user: str, files: dict[str, bytes | None], tmp: Path) -> list[Upload]:
    """What the app and Chainlit do for a user message with files: the thread and the user message saved, each file
    an element of that message (type and mime as Chainlit infers them), its bytes stored beside it."""
    await store.upsert_thread(thread, user=user, name="docs")
    message = str(uuid.uuid4())
    await store.upsert_step({"id": message, "threadId": thread, "type": "user_message", "output": "看看这个", "createdAt": "1"})
    uploads = []
    for name, data in files.items():
        path = tmp / f"{uuid.uuid4()}-{name}"
        path.write_bytes(data or b"")
        mime = "application/pdf" if name.endswith(".pdf") else "text/markdown"
        element = {
            "id": str(uuid.uuid4()), "threadId": thread, "forId": message, "name": name, "path": str(path), "chainlitKey": "k",
            "display": "inline", "type": "pdf" if mime == "application/pdf" else "file", "mime": mime,
            thread_dicts.ORDER_KEY: time.time_ns(),  # as the data layer stamps it
        }  # fmt: skip
        await store.upsert_element(thread_dicts.element_for_store(element), data)
        uploads.append(Upload(str(path), name, len(data or b"")))
    answer = str(uuid.uuid4())
    await store.upsert_step({"id": answer, "threadId": thread, "type": "assistant_message", "output": "【1】", "createdAt": "2"})
    source = {"id": str(uuid.uuid4()), "threadId": thread, "forId": answer, "name": "【1】", "type": "text"}
    source[thread_dicts.ORDER_KEY] = time.time_ns()
    await store.upsert_element(source, "**note.md**\n\n数据库每天凌晨两点备份".encode())
    return uploads


async def _thread(store: ThreadStore, thread: str) -> dict:
    """The ThreadDict Chainlit hands to on_chat_resume (the data layer's get_thread)."""
    row = await store.get_thread(thread)
    return thread_dicts.thread_dict(row, await store.steps(thread), await store.elements(thread))


def _files(c: DocsConfig, owner: str, thread: str) -> list[str]:
    with Index(c.index_file, tokenizer=c.tokenizer) as index:
        return [d.name for d in index.documents(Scope(collections=[], owner=owner, conversation=thread))]


def _private(c: DocsConfig) -> list[tuple[str | None, str | None, str]]:
    with Index(c.index_file, tokenizer=c.tokenizer) as index:
        return [(d.owner, d.conversation, d.name) for d in index.documents() if d.owner is not None]


def test_a_thread_resumed_on_another_host_answers_from_its_upload_and_a_second_resume_indexes_nothing(tmp_path, caplog):
    one, two = host(tmp_path, "host1"), host(tmp_path, "host2")
    caplog.set_level(logging.INFO, logger="ernie_ops.chat")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            uploads = await _message_with_files(store, "t1", "alice", {"note.md": NOTE.encode()}, tmp_path)
            assert [o.action for o in await DocsSession(one, "alice", "t1").upload(uploads)] == ["added"]
            on_two = DocsSession(two, "alice", "t1")
            assert not (await on_two.retrieve(QUESTION)).answerable  # host 2 has never seen the file
            thread = await _thread(store, "t1")
            first = await restore_uploads(two, thread, "alice", store.element_content)
            again = await restore_uploads(two, thread, "alice", store.element_content)
            at_home = await restore_uploads(one, thread, "alice", store.element_content)
            return first, again, at_home, await DocsSession(two, "alice", "t1").retrieve(QUESTION)
        finally:
            await store.close()

    first, again, at_home, found = asyncio.run(go())
    assert (first.indexed, first.failed) == (["note.md"], [])
    assert found.answerable and found.hits[0].file == "note.md" and "凌晨两点" in found.hits[0].text
    assert (again.indexed, again.present) == ([], ["note.md"]) and (at_home.indexed, at_home.present) == ([], ["note.md"])
    assert _files(two, "alice", "t1") == ["note.md"]  # the source shown with the reply is not an upload
    logged = [r.getMessage() for r in caplog.records if "re-indexed from the history database" in r.getMessage()]
    assert logged == [
        "docs: thread t1 of alice: 1 upload(s) re-indexed from the history database",
        "docs: thread t1 of alice: 0 upload(s) re-indexed from the history database",
        "docs: thread t1 of alice: 0 upload(s) re-indexed from the history database",
    ]


def test_a_file_sent_again_under_its_name_gives_the_newest_copy_on_a_host_that_holds_an_older_one(tmp_path):
    one, two = host(tmp_path, "host1"), host(tmp_path, "host2")
    newer = NOTE.replace("十四天", "三十天")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            old = await _message_with_files(store, "t1", "alice", {"note.md": NOTE.encode()}, tmp_path)
            await DocsSession(one, "alice", "t1").upload(old)  # host 1 indexed the first copy, then died
            new = await _message_with_files(store, "t1", "alice", {"note.md": newer.encode()}, tmp_path)
            await DocsSession(two, "alice", "t1").upload(new)  # the second copy went to host 2
            assert [u.copies for u in stored_uploads(await _thread(store, "t1"))] == [2]
            back = await restore_uploads(one, await _thread(store, "t1"), "alice", store.element_content)
            return back, await DocsSession(one, "alice", "t1").retrieve("备份文件保留多久？")
        finally:
            await store.close()

    back, found = asyncio.run(go())
    assert back.indexed == ["note.md"] and "三十天" in found.hits[0].text


def test_another_users_thread_is_never_indexed(tmp_path):
    one, two = host(tmp_path, "host1"), host(tmp_path, "host2")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            uploads = await _message_with_files(store, "bob-t", "bob", {"note.md": NOTE.encode()}, tmp_path)
            await DocsSession(one, "bob", "bob-t").upload(uploads)
            thread = await _thread(store, "bob-t")
            with pytest.raises(NotTheOwner, match="belongs to bob, not to alice"):
                await restore_uploads(two, thread, "alice", store.element_content)
            return await DocsSession(two, "alice", "bob-t").retrieve(QUESTION)
        finally:
            await store.close()

    found = asyncio.run(go())
    assert not found.answerable and _private(two) == []  # neither in alice's scope nor in bob's on host 2


def test_a_stored_upload_over_the_limit_or_without_its_bytes_is_logged_and_the_others_are_indexed(tmp_path, caplog):
    one = host(tmp_path, "host1")
    two = host(tmp_path, "host2", max_file_mb=0.002)  # host 2's limit (2 KB) is lower than host 1's was
    big = ("# 大文件\n\n" + "日志保存在 /var/log/ernie 目录。\n" * 200).encode()
    caplog.set_level(logging.INFO, logger="ernie_ops.chat")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            files = {"big.md": big, "lost.md": None, "note.md": NOTE.encode()}  # lost.md: its bytes never reached the database
            uploads = await _message_with_files(store, "t1", "alice", files, tmp_path)
            await DocsSession(one, "alice", "t1").upload([u for u in uploads if u.name != "lost.md"])
            return await restore_uploads(two, await _thread(store, "t1"), "alice", store.element_content)
        finally:
            await store.close()

    restored = asyncio.run(go())
    assert restored.indexed == ["note.md"] and _files(two, "alice", "t1") == ["note.md"]
    assert sorted((o.name, o.reason) for o in restored.failed) == [("big.md", "too_large"), ("lost.md", "unreadable")]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("upload big.md not re-indexed" in w and "too_large" in w for w in warned), warned
    assert any("upload lost.md not re-indexed: lost.md: the history database holds no copy of it (unreadable)" in w for w in warned)


class _Threads:
    """The sweep's questions, asked of the database the way the app does (a store, then its query)."""

    def __init__(self, url: str):
        self.url = url

    async def _ask(self, question):
        store = await ThreadStore.open(self.url)
        try:
            return await question(store)
        finally:
            await store.close()

    async def existing_threads(self, ids: list[str]) -> set[str]:
        return await self._ask(lambda store: store.existing_threads(ids))

    async def has_threads(self) -> bool:
        return await self._ask(lambda store: store.has_threads())


def test_the_sweep_drops_the_uploads_of_threads_deleted_elsewhere_and_keeps_the_rest(tmp_path, caplog):
    one = host(tmp_path, "host1")
    later = datetime.now(UTC) + timedelta(hours=2)  # the next daily pass, past the grace of a fresh upload
    caplog.set_level(logging.INFO, logger="ernie_ops.chat")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            for thread, user in (("t1", "alice"), ("t2", "alice"), ("b1", "bob")):
                uploads = await _message_with_files(store, thread, user, {"note.md": NOTE.encode()}, tmp_path)
                await DocsSession(one, user, thread).upload(uploads)
            await store.delete_thread("t1")  # deleted on another host: host 1 was not told
            await store.delete_threads_of("bob")
        finally:
            await store.close()
        existing = _Threads(history_url(tmp_path))
        fresh = await sweep_orphan_uploads(one, existing)  # right away: younger than the grace, kept
        swept = await sweep_orphan_uploads(one, existing, now=later)
        return fresh, swept, await sweep_orphan_uploads(one, existing, now=later)

    fresh, swept, again = asyncio.run(go())
    assert (fresh, swept, again) == (0, 2, 0)
    assert _private(one) == [("alice", "t2", "note.md")]
    assert "docs: 2 uploaded document(s) of 2 deleted thread(s) removed from this host's index" in caplog.text
    never = host(tmp_path, "host3")  # a host nobody uploaded to: nothing swept, no index created
    assert asyncio.run(sweep_orphan_uploads(never, _Threads(history_url(tmp_path)))) == 0
    assert not Path(never.index_file).exists()


def test_the_sweep_removes_nothing_when_the_database_cannot_be_read(tmp_path, caplog):
    one = host(tmp_path, "host1")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")

    async def go():
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            uploads = await _message_with_files(store, "t1", "alice", {"note.md": NOTE.encode()}, tmp_path)
            await DocsSession(one, "alice", "t1").upload(uploads)
        finally:
            await store.close()
        unreadable = _Threads(f"sqlite+aiosqlite:///{blocker}/history.sqlite")  # a real database that cannot be opened
        with pytest.raises(HistoryUnavailable):
            await unreadable.existing_threads(["t1"])
        return await sweep_orphan_uploads(one, unreadable, now=datetime.now(UTC) + timedelta(days=2))

    assert asyncio.run(go()) is None
    assert _private(one) == [("alice", "t1", "note.md")]
    assert "uploads of deleted threads not swept this time (the history database cannot be read)" in caplog.text


async def _uploads_in_threads(one: DocsConfig, tmp_path: Path, threads: list[str]) -> None:
    store = await ThreadStore.open(history_url(tmp_path))
    try:
        for thread in threads:
            uploads = await _message_with_files(store, thread, "alice", {f"{thread}.md": NOTE.encode()}, tmp_path)
            await DocsSession(one, "alice", thread).upload(uploads)
    finally:
        await store.close()


def test_an_emptied_history_database_is_no_reason_to_drop_any_upload(tmp_path, caplog):
    """What the busy-taken-for-damaged bug did: the live history moved aside and an empty one started in its place.
    Every upload's thread is then 'missing'; the sweep keeps them all and says why."""
    one = host(tmp_path, "host1")
    asyncio.run(_uploads_in_threads(one, tmp_path, ["t1", "t2"]))
    (tmp_path / "history.sqlite").rename(tmp_path / "history.sqlite.corrupt-20261206T000000Z")
    for wal in tmp_path.glob("history.sqlite-*"):
        wal.unlink()
    later = datetime.now(UTC) + timedelta(days=2)
    assert asyncio.run(sweep_orphan_uploads(one, _Threads(history_url(tmp_path)), now=later)) is None
    assert sorted(name for _, _, name in _private(one)) == ["t1.md", "t2.md"]
    assert "the history database holds no thread at all: this host's 2 upload(s) kept" in caplog.text


def test_a_sweep_removes_at_most_its_share_of_the_uploads_in_one_pass(tmp_path, caplog):
    """A database restored from an old backup lacks the newest threads, not deleted ones: 7 of 8 uploads would go,
    over half and over the 5 always allowed, so none go; raised to 1.0 for one pass, the same sweep removes them."""
    one = host(tmp_path, "host1")
    threads = [f"t{i}" for i in range(8)]
    asyncio.run(_uploads_in_threads(one, tmp_path, threads))

    async def forget(ids: list[str]) -> None:
        store = await ThreadStore.open(history_url(tmp_path))
        try:
            for thread in ids:
                await store.delete_thread(thread)
        finally:
            await store.close()

    asyncio.run(forget(threads[1:]))
    later = datetime.now(UTC) + timedelta(days=2)
    assert asyncio.run(sweep_orphan_uploads(one, _Threads(history_url(tmp_path)), now=later)) is None
    assert len(_private(one)) == 8
    assert "7 of this host's 8 uploads belong to threads the history database lacks, more than chat.docs.sweep_max_share 0.5" in caplog.text
    assert asyncio.run(sweep_orphan_uploads(host(tmp_path, "host1", sweep_max_share=1.0), _Threads(history_url(tmp_path)), now=later)) == 7
    assert [name for _, _, name in _private(one)] == ["t0.md"]
