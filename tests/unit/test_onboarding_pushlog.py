"""The onboarding push log (ernie_ops.onboarding.pushlog) on real SQLite files: pushed once (a second
push, two threads and two processes at the same moment), content never rewritten, confirmed once,
employees isolated, all-or-nothing on a real mid-push failure, reopen, a damaged file kept aside,
foreign/newer files refused untouched, a busy log as a sentence.
"""

from __future__ import annotations

import itertools
import multiprocessing
import re
import sqlite3
import threading
from pathlib import Path

import pytest

from ernie_ops.onboarding import pushlog
from ernie_ops.onboarding.pushlog import NewItem, PushLog, PushLogError
from tests.harness import sqlite_damage

ITEMS = [
    NewItem("welcome", "welcome", "欢迎加入研发部，小王！"),
    NewItem("task-aaaa", "task", "领取电脑并登录企业邮箱"),
    NewItem("guide-bbbb", "guide", "VPN\n安装客户端后用工号登录\nhttps://wiki.example.com/vpn"),
]


def _clock():
    """Distinct, increasing times: a second write with the real clock could fall in the same second."""
    counter = itertools.count(1)
    return lambda: f"2026-12-01T09:00:{next(counter):02d}+00:00"


def _raw(path: Path, sql: str, params=()) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def log(tmp_path):
    pl = PushLog(tmp_path / "onboarding.sqlite", clock=_clock())
    yield pl
    pl.close()


def _view(items) -> list[tuple]:
    return [(i.employee, i.item_id, i.kind, i.content, i.pushed_at, i.confirmed_at) for i in items]


# ---- pushed once ---------------------------------------------------------------------------------


def test_push_records_the_items_and_a_second_push_adds_nothing_and_changes_nothing(log, tmp_path):
    first = log.push("e1001", ITEMS)
    assert [(i.item_id, i.kind, i.content, i.confirmed) for i in first] == [(i.item_id, i.kind, i.content, False) for i in ITEMS]
    assert {i.pushed_at for i in first} == {"2026-12-01T09:00:01+00:00"}
    # a reload: the same items again, the welcome rewritten by the model this time, plus one new task
    again = [NewItem("welcome", "welcome", "另一段欢迎词"), ITEMS[1], ITEMS[2], NewItem("task-cccc", "task", "参加新人培训")]
    second = log.push("e1001", again)
    assert _view(second[:3]) == _view(first)  # content and pushed_at as first stored
    assert second[0].content == "欢迎加入研发部，小王！"
    assert (second[3].item_id, second[3].content, second[3].pushed_at) == ("task-cccc", "参加新人培训", "2026-12-01T09:00:02+00:00")
    assert log.push("e1001", []) == second
    assert log.items("e1001") == second
    assert _raw(tmp_path / "onboarding.sqlite", "SELECT count(*) FROM items") == [(4,)]


def _push_in_thread(path: Path, barrier: threading.Barrier, out: list) -> None:
    with PushLog(path) as pl:
        barrier.wait()
        out.append(_view(pl.push("e1001", ITEMS)))


def test_two_sessions_in_two_threads_push_each_item_once(tmp_path):
    path = tmp_path / "onboarding.sqlite"
    for _ in range(5):
        path.unlink(missing_ok=True)
        barrier, out = threading.Barrier(2), []
        threads = [threading.Thread(target=_push_in_thread, args=(path, barrier, out)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(out) == 2 and out[0] == out[1]
        assert [row[1] for row in out[0]] == [i.item_id for i in ITEMS]
        assert _raw(path, "SELECT item_id, count(*) FROM items GROUP BY item_id ORDER BY seq") == [(i.item_id, 1) for i in ITEMS]


def test_one_log_shared_by_two_threads_pushes_each_item_once(log, tmp_path):
    barrier, out = threading.Barrier(2), []

    def run():
        barrier.wait()
        out.append(_view(log.push("e1001", ITEMS)))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == 2 and out[0] == out[1] and len(out[0]) == 3
    assert _raw(tmp_path / "onboarding.sqlite", "SELECT count(*) FROM items") == [(3,)]


def _push_in_process(path: str, barrier, queue) -> None:
    with PushLog(path) as pl:
        barrier.wait()
        queue.put(_view(pl.push("e1001", ITEMS)))


def test_two_processes_pushing_at_the_same_moment_record_each_item_once(tmp_path):
    path = tmp_path / "onboarding.sqlite"
    ctx = multiprocessing.get_context("fork")  # the children inherit this module: no re-import
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_push_in_process, args=(str(path), barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert results[0] == results[1]
    assert [row[1] for row in results[0]] == [i.item_id for i in ITEMS]
    assert _raw(path, "SELECT item_id, count(*) FROM items GROUP BY item_id ORDER BY seq") == [(i.item_id, 1) for i in ITEMS]


# ---- all or nothing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (NewItem("task-bad", "task", 42), r"CHECK constraint failed: content_is_text"),
        (NewItem("task-bad", "task", b"bytes"), r"CHECK constraint failed: content_is_text"),
        (NewItem("task-bad", "task", ["a", "list"]), r"type 'list' is not supported|Error binding parameter"),
        (NewItem("task-bad", "reminder", "text"), r"CHECK constraint failed: kind_is_known"),
        (NewItem("task-bad", "task", "   "), r"CHECK constraint failed: content_is_text"),
    ],
)
def test_a_failure_after_the_first_row_leaves_nothing_half_written(log, tmp_path, bad, reason):
    """Real failures: SQLite's CHECKs and the driver's parameter binding refuse the second item."""
    log.push("e1001", [ITEMS[0]])
    before = _view(log.items("e1001"))
    items = [ITEMS[1], bad, ITEMS[2]]  # ITEMS[1] is inserted, then the bad one fails
    with pytest.raises(PushLogError) as err:
        log.push("e1001", items)
    assert re.search(reason, str(err.value))
    assert str(err.value).startswith("item 2 ('task-bad') for employee 'e1001' cannot be recorded (")
    assert str(err.value).endswith("; nothing was pushed")
    assert _view(log.items("e1001")) == before
    assert _raw(tmp_path / "onboarding.sqlite", "SELECT item_id FROM items") == [("welcome",)]
    assert [i.item_id for i in log.push("e1001", [ITEMS[1], ITEMS[2]])] == ["welcome", "task-aaaa", "guide-bbbb"]  # still usable


@pytest.mark.parametrize("employee", ["", "   ", None, 1001])
def test_an_invalid_employee_id_is_a_sentence(log, employee):
    with pytest.raises(PushLogError, match=r"is not a valid employee id: it must be a non-empty text; check the HR record"):
        log.push(employee, ITEMS)
    with pytest.raises(PushLogError, match=r"is not a valid employee id"):
        log.confirm(employee, "welcome")
    with pytest.raises(PushLogError, match=r"is not a valid employee id"):
        log.items(employee)


# ---- confirmed once, employees isolated ----------------------------------------------------------


def test_confirm_is_idempotent_and_keeps_the_first_time(log):
    log.push("e1001", ITEMS)
    first = log.confirm("e1001", "task-aaaa")
    assert first.confirmed and first.confirmed_at == "2026-12-01T09:00:02+00:00"
    second = log.confirm("e1001", "task-aaaa")
    assert second == first
    states = {i.item_id: i.confirmed_at for i in log.items("e1001")}
    assert states == {"welcome": None, "task-aaaa": "2026-12-01T09:00:02+00:00", "guide-bbbb": None}
    # a later push (a reload) does not reset the confirmation
    assert {i.item_id: i.confirmed_at for i in log.push("e1001", ITEMS)} == states


def test_employees_see_and_confirm_only_their_own_items(log):
    log.push("e1001", ITEMS)
    log.push("e1002", [NewItem("welcome", "welcome", "欢迎小李"), NewItem("task-dddd", "task", "开通代码仓库权限")])
    assert [i.item_id for i in log.items("e1001")] == ["welcome", "task-aaaa", "guide-bbbb"]
    assert [(i.employee, i.item_id, i.content) for i in log.items("e1002")] == [
        ("e1002", "welcome", "欢迎小李"),
        ("e1002", "task-dddd", "开通代码仓库权限"),
    ]
    assert log.items("e9999") == []
    sentence = r"employee 'e1002' has no pushed item '{}' to confirm; reload the page to see your items"
    with pytest.raises(PushLogError, match=sentence.format("task-aaaa")):  # e1001's item
        log.confirm("e1002", "task-aaaa")
    with pytest.raises(PushLogError, match=sentence.format("task-zzzz")):  # nobody's
        log.confirm("e1002", "task-zzzz")
    assert all(i.confirmed_at is None for i in log.items("e1001"))
    log.confirm("e1002", "welcome")
    assert log.items("e1001")[0].confirmed_at is None  # the same item_id of another employee is untouched


def test_reopening_keeps_items_and_confirmations(tmp_path):
    path = tmp_path / "state" / "onboarding.sqlite"  # the directory is created
    with PushLog(path, clock=_clock()) as pl:
        pl.push("e1001", ITEMS)
        pl.confirm("e1001", "welcome")
        before = _view(pl.items("e1001"))
    with PushLog(path) as pl:
        assert pl.warnings == []
        assert _view(pl.items("e1001")) == before
        assert _view(pl.push("e1001", ITEMS)) == before
    assert _raw(path, "PRAGMA journal_mode") == [("wal",)]
    assert _raw(path, "PRAGMA application_id") == [(pushlog.APPLICATION_ID,)]


# ---- damaged, foreign, newer, busy ---------------------------------------------------------------


def _build(path: Path) -> None:
    with PushLog(path) as pl:
        for n in range(200):
            pl.push(f"e{n}", [NewItem(f"task-{k}", "task", f"任务 {k} " + "说明 " * 40) for k in range(5)])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.mark.parametrize("damage", sqlite_damage.KINDS)
def test_a_damaged_log_is_kept_aside_and_a_fresh_one_started(tmp_path, damage):
    path = tmp_path / "onboarding.sqlite"
    _build(path)
    data = sqlite_damage.damage_file(path, damage)
    with PushLog(path) as pl:
        (warning,) = pl.warnings
        (aside,) = tmp_path.glob("onboarding.sqlite.corrupt-*")
        assert re.fullmatch(r"onboarding\.sqlite\.corrupt-\d{8}T\d{6}Z", aside.name)
        assert aside.read_bytes() == data
        assert warning.startswith(f"the onboarding push log {path} was damaged (")
        assert warning.endswith(f"; kept it as {aside} and started an empty log: items will be pushed again and must be confirmed again")
        assert pl.items("e1") == []
        assert len(pl.push("e1", ITEMS)) == 3


def test_files_that_are_not_a_push_log_are_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not a database\n")
    with pytest.raises(PushLogError, match=r"notes\.txt is not a SQLite database, so it is not an onboarding push log; move it away"):
        PushLog(text)
    assert text.read_bytes() == b"not a database\n"
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(PushLogError, match=r"other\.db is a SQLite database of another program, not an onboarding push log"):
        PushLog(other)
    assert _raw(other, "SELECT name FROM sqlite_schema") == [("t",)]
    newer = tmp_path / "newer.sqlite"
    PushLog(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(PushLogError, match=r"newer\.sqlite was written by a newer ernie-ops \(push log schema 99, this one knows 1\)"):
        PushLog(newer)
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_a_state_directory_that_is_a_file_is_a_sentence(tmp_path):
    (tmp_path / "state").write_text("x")
    with pytest.raises(PushLogError, match=r"cannot open the onboarding push log .*: a part of that path is a file, not a directory"):
        PushLog(tmp_path / "state" / "onboarding.sqlite")


def test_a_log_held_by_another_writer_past_the_busy_timeout_is_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(pushlog, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "onboarding.sqlite"
    with PushLog(path) as pl:
        pl.push("e1001", ITEMS[:1])
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
        try:
            with pytest.raises(PushLogError, match=r"onboarding push log .* is busy: another process has been writing it for over 0 s"):
                pl.push("e1001", ITEMS)
            with pytest.raises(PushLogError, match=r"is busy"):
                pl.confirm("e1001", "welcome")
            assert [i.item_id for i in pl.items("e1001")] == ["welcome"]  # readers are not blocked (WAL)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert len(pl.push("e1001", ITEMS)) == 3


def test_damage_found_in_use_is_a_sentence_and_the_next_open_keeps_the_file_aside(tmp_path):
    path = tmp_path / "onboarding.sqlite"
    with PushLog(path) as pl:  # ~10 MB: more than SQLite's 2 MB page cache, so the reads below go to the file
        for n in range(100):
            pl.push(f"e{n}", [NewItem(f"task-{k}", "task", f"任务 {k} " + "说明" * 5000) for k in range(3)])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    pl = PushLog(path)
    assert pl.warnings == []
    data = bytearray(path.read_bytes())
    for off in range(4096 * 2, len(data), 4096):  # damage every page from page 3 while the log is open
        data[off : off + 4096] = b"\xa5" * 4096
    with open(path, "r+b") as f:
        f.write(bytes(data))
    sentence = r"onboarding\.sqlite is damaged \(.*\); the next time it is opened it is kept aside as onboarding\.sqlite\.corrupt-"
    with pytest.raises(PushLogError, match=sentence):
        pl.items("e0")
    with pytest.raises(PushLogError, match=sentence):
        pl.push("e0", ITEMS)
    pl.close()
    with PushLog(path) as pl:
        assert len(pl.warnings) == 1 and len(list(tmp_path.glob("onboarding.sqlite.corrupt-*"))) == 1
        assert pl.items("e0") == []
