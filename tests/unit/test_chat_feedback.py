"""`ernie-ops chat feedback` and `ernie-ops chat-user remove`'s conversations: the report's pure logic, and the
commands end to end over a real SQLite history (and an unreachable PostgreSQL: one sentence, exit 1)."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from datetime import UTC, datetime, timedelta

import pytest

from ernie_ops import cli
from ernie_ops.chat import users
from ernie_ops.cli import chat as chat_cli
from ernie_ops.cli.console import out_console
from ernie_ops.errors import UsageError
from ernie_ops.threads import feedback
from ernie_ops.threads.store import FeedbackRow, ThreadStore
from tests.harness.thread_store_contract import Clock, iso, step


@pytest.mark.parametrize(
    "text, delta", [("7d", timedelta(days=7)), ("24h", timedelta(hours=24)), (" 30m ", timedelta(minutes=30)), ("2w", timedelta(weeks=2))]
)
def test_since_takes_weeks_days_hours_minutes(text, delta):
    assert feedback.parse_since(text) == delta


@pytest.mark.parametrize("text", ["7", "d", "0d", "-1d", "1.5d", "7 days", "99999999999w"])
def test_a_bad_since_is_a_usage_error_with_examples(text):
    with pytest.raises(UsageError, match=r"--since '.*'"):
        feedback.parse_since(text)


def _row(**over) -> FeedbackRow:
    now = datetime.now(UTC)
    base = dict(
        id="f1", created_at=now, updated_at=now, user="ann", thread_id="t1", thread_name="报销", step_id="a1", value=0,
        comment="wrong", step={"id": "a1", "output": " 见第三节 【1】 "}, question={"id": "q1", "output": "发票怎么报销?"},
        elements=[{"id": "e1", "name": "【1】"}, {"id": "e2", "name": "【2】"}, {"id": "e3"}],
        texts={"e1": "**报销制度.pdf p.3**\n\n第三节", "e2": "\n\n【2】\n"},
    )  # fmt: skip
    return FeedbackRow(**{**base, **over})


def test_report_rows_carry_rating_question_answer_and_sources():
    (r,) = feedback.report([_row()])
    assert (r.user, r.rating, r.comment, r.question, r.answer) == ("ann", "👎", "wrong", "发票怎么报销?", "见第三节 【1】")
    assert r.sources == ["【1】 报销制度.pdf p.3", "【2】", "e3"]
    (up,) = feedback.report([_row(value=1, comment=None, user=None, question=None, step=None, elements=[])])
    assert (up.rating, up.comment, up.user, up.question, up.answer, up.sources) == ("👍", "", "(unknown)", "", "", [])
    (doc,) = feedback.as_json([r])
    assert (
        doc["rating"] == "down"
        and doc["value"] == 0
        and doc["when"] == r.when.isoformat()
        and doc["sources"][0] == "【1】 报销制度.pdf p.3"
    )


def test_step_text_prefers_output_then_input_and_shorten_cuts_one_line():
    assert feedback.step_text({"output": "", "input": "asked"}) == "asked"
    assert feedback.step_text({"output": None}) == "" and feedback.step_text(None) == ""
    assert feedback.shorten("a\nb  c", 10) == "a b c" and feedback.shorten("x" * 12, 10) == "x" * 9 + "…"


def _config(tmp_path, history: str = "") -> str:
    cfg = tmp_path / "ernie.yaml"
    cfg.write_text(
        f"chat:\n  users_file: {tmp_path / 'users.yaml'}\n  history:\n    sqlite_file: {tmp_path / 'state' / 'history.sqlite'}\n{history}"
    )
    return str(cfg)


def _history(tmp_path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'state' / 'history.sqlite'}"


async def _conversations(url: str) -> None:
    clock = Clock(datetime.now(UTC) - timedelta(days=10))
    store = await ThreadStore.open(url, now=clock)
    for user in ("ann", "bob"):
        await store.upsert_thread(f"{user}-t", user=user, name=f"{user}'s [bold]thread[/]")
        await store.upsert_step(step(f"{user}-q-old", f"{user}-t", iso(clock), "user_message", "old question"))
        await store.upsert_step(step(f"{user}-a-old", f"{user}-t", iso(clock, 1), output="old answer"))
        await store.upsert_feedback(feedback_id=None, step_id=f"{user}-a-old", value=1, comment="old")
    clock.t = datetime.now(UTC) - timedelta(days=1)
    await store.upsert_step(step("ann-q", "ann-t", iso(clock), "user_message", "发票怎么报销?"))
    await store.upsert_step(step("ann-a", "ann-t", iso(clock, 1), output="见第三节 【1】"))
    await store.upsert_element(
        {"id": "src1", "threadId": "ann-t", "forId": "ann-a", "name": "【1】", "type": "text"}, "**报销制度.pdf p.3**\n\n…".encode()
    )
    await store.upsert_feedback(feedback_id=None, step_id="ann-a", value=0, comment="[red]wrong[/] section")
    await store.close()


def test_feedback_lists_the_recent_ones_with_question_answer_and_sources(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(out_console, "_width", 250)  # a wide terminal: each cell on one line
    cfg = _config(tmp_path)
    asyncio.run(_conversations(_history(tmp_path)))
    assert cli.main(["--config", cfg, "chat", "feedback", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert (doc["user"], doc["rating"], doc["comment"], doc["question"], doc["answer"]) == (
        "ann", "down", "[red]wrong[/] section", "发票怎么报销?", "见第三节 【1】"
    )  # fmt: skip
    assert doc["sources"] == ["【1】 报销制度.pdf p.3"] and doc["thread_name"] == "ann's [bold]thread[/]"
    assert cli.main(["--config", cfg, "chat", "feedback", "--since", "2w", "--json"]) == 0
    assert sorted(d["comment"] for d in json.loads(capsys.readouterr().out)) == ["[red]wrong[/] section", "old", "old"]
    assert cli.main(["--config", cfg, "chat", "feedback", "--since", "3d"]) == 0
    out, err = capsys.readouterr()
    assert "👎" in out and "[red]wrong[/] section" in out and "发票怎么报销?" in out and "【1】 报销制度.pdf p.3" in out
    assert "old question" not in out and "1 feedback(s): 0 up, 1 down" in err


def test_feedback_without_a_history_says_so_and_creates_nothing(tmp_path, capsys):
    cfg = _config(tmp_path)
    assert cli.main(["--config", cfg, "chat", "feedback"]) == 0
    assert "no chat history yet" in capsys.readouterr().err
    assert cli.main(["--config", cfg, "chat", "feedback", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [] and not (tmp_path / "state").exists()
    assert cli.main(["--config", cfg, "chat", "feedback", "--since", "soon"]) == 2
    assert "--since 'soon' is not a duration" in capsys.readouterr().err


def test_an_unreachable_database_is_one_sentence_and_exit_1(tmp_path, capsys, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    monkeypatch.setenv("CHAT_DB", f"postgresql://chat:s3cret@127.0.0.1:{free}/chat")
    cfg = _config(tmp_path, "    backend: postgresql\n    database_url_env: CHAT_DB\n")
    assert cli.main(["--config", cfg, "chat", "feedback"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the chat history database postgresql+asyncpg://chat:***@127.0.0.1:{free}/chat could not be opened ")
    assert "s3cret" not in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    monkeypatch.delenv("CHAT_DB")
    assert cli.main(["--config", cfg, "chat", "feedback"]) == 2
    assert "CHAT_DB is not set" in capsys.readouterr().err


def test_chat_without_a_subcommand_still_runs_the_app():
    args = cli.build_parser().parse_args(["chat", "--host", "0.0.0.0", "--port", "9000", "--state-dir", "/tmp/x"])
    assert (args.func, args.host, args.port, args.state_dir) == (chat_cli.run, "0.0.0.0", 9000, "/tmp/x")
    assert cli.build_parser().parse_args(["chat", "feedback"]).func is chat_cli.run_feedback


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def _owned(url: str) -> dict[str, int]:
    store = await ThreadStore.open(url)
    try:
        return {u: await store.count_threads_of(u) for u in ("ann", "bob")} | {"ann-user": int(await store.get_user("ann") is not None)}
    finally:
        await store.close()


def _setup_users(tmp_path) -> str:
    cfg = _config(tmp_path)
    for name in ("ann", "bob"):
        users.add(str(tmp_path / "users.yaml"), name, "pass-word-1")
    asyncio.run(_conversations(_history(tmp_path)))

    async def user_row():
        store = await ThreadStore.open(_history(tmp_path))
        await store.upsert_user("ann", {})
        await store.close()

    asyncio.run(user_row())
    return cfg


@pytest.mark.parametrize(
    "flags, stdin, deleted",
    [
        (["--delete-threads"], io.StringIO(""), True),
        (["--keep-threads"], _Terminal(""), False),
        ([], io.StringIO(""), False),  # a script: kept, and told how to delete
        ([], _Terminal("y\n"), True),
        ([], _Terminal("n\n"), False),
    ],
    ids=["delete-flag", "keep-flag", "no-tty", "tty-yes", "tty-no"],
)
def test_removing_a_user_offers_to_delete_their_conversations(tmp_path, capsys, monkeypatch, flags, stdin, deleted):
    cfg = _setup_users(tmp_path)
    monkeypatch.setattr("sys.stdin", stdin)
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann", *flags]) == 0
    out, err = capsys.readouterr()
    assert ("delete ann's 1 conversation(s) from the chat history too?" in out) == (not flags and isinstance(stdin, _Terminal))
    assert list(users.load(str(tmp_path / "users.yaml"))) == ["bob"]
    after = asyncio.run(_owned(_history(tmp_path)))
    if deleted:
        assert after == {"ann": 0, "bob": 1, "ann-user": 0} and "deleted 1 conversation(s) of ann" in err
    else:
        assert after == {"ann": 1, "bob": 1, "ann-user": 1} and "ernie-ops chat-user remove ann --delete-threads" in err


def test_a_new_user_given_a_removed_users_name_does_not_get_their_kept_conversations(tmp_path, capsys, monkeypatch):
    """ann leaves, her conversations kept; a newcomer is added as ann: the sidebar lists none of them and the thread's
    author is not 'ann' (so Chainlit's owner check refuses it to her). The operator can still delete them by name."""
    cfg = _setup_users(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann", "--keep-threads"]) == 0
    assert "a new user named ann does not get them" in capsys.readouterr().err
    users.add(str(tmp_path / "users.yaml"), "ann", "newcomer-pass-1")

    async def seen_by_the_new_ann() -> tuple[list, str | None]:
        store = await ThreadStore.open(_history(tmp_path))
        try:
            rows, _ = await store.list_threads("ann")
            return rows, await store.thread_user("ann-t")
        finally:
            await store.close()

    rows, author = asyncio.run(seen_by_the_new_ann())
    assert rows == [] and author is not None and author.startswith("ann~removed-"), (rows, author)
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann", "--delete-threads"]) == 0
    assert asyncio.run(_owned(_history(tmp_path)))["ann"] == 0  # the retired ones went with the name


def test_delete_threads_after_the_user_was_removed_keeping_them(tmp_path, capsys, monkeypatch):
    cfg = _setup_users(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann"]) == 0
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann", "--delete-threads"]) == 0
    err = capsys.readouterr().err
    assert "ann is not in" in err and "deleting their conversations only" in err and "deleted 1 conversation(s) of ann" in err
    assert asyncio.run(_owned(_history(tmp_path)))["ann"] == 0
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann"]) == 2  # without the flag: the usual error
    assert "no user 'ann'" in capsys.readouterr().err


def test_deleting_a_users_threads_drops_their_uploads_from_this_hosts_docs_index(tmp_path, capsys, monkeypatch):
    """Real docs index: ann's uploads (in two conversations) go with her threads, bob's stay; the line and the help say
    which host's index that is."""
    from ernie_ops.chat.docs_session import DocsSession, Upload
    from ernie_ops.docs.config import DocsConfig
    from ernie_ops.docs.store import Index

    index_file = tmp_path / "docs" / "index.sqlite"
    _setup_users(tmp_path)
    cfg = _config(tmp_path, f"  docs:\n    index_file: {index_file}\n")  # the same config, with this host's docs index
    note = tmp_path / "note.md"
    note.write_text("# 备份\n\n数据库每天凌晨两点备份。\n", encoding="utf-8")
    docs = DocsConfig.model_validate({"index_file": str(index_file)})
    for user, thread in (("ann", "ann-t"), ("ann", "ann-old"), ("bob", "bob-t")):
        assert [o.action for o in asyncio.run(DocsSession(docs, user, thread).upload([Upload(str(note), "note.md")]))] == ["added"]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["--config", cfg, "chat-user", "remove", "ann", "--delete-threads"]) == 0
    err = capsys.readouterr().err
    assert "deleted 1 conversation(s) of ann from the chat history and 2 uploaded document(s) from this host's docs index" in err
    assert "other chat hosts remove theirs at their daily sweep" in err
    with Index(str(index_file)) as index:
        assert [(d.owner, d.conversation) for d in index.documents() if d.owner] == [("bob", "bob-t")]
    with pytest.raises(SystemExit):
        cli.main(["chat-user", "remove", "--help"])
    assert "their uploads in this host's docs index" in " ".join(capsys.readouterr().out.split())
