"""Chainlit's data layer (chat_app/data_layer.py) in the chat venv, with Chainlit's own context and session objects,
over a real SQLite history and a real unreachable PostgreSQL address (nothing listens: the driver's own refusal).
The app's routes over the same layer (ownership): tests/integration/test_chat_app.py."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.harness import chat_venv


@pytest.fixture(scope="module")
def venv() -> Path:
    return chat_venv.cached()


def probe(venv: Path, cwd: Path, mode: str, url: str) -> dict:
    env = chat_venv.run_env(venv) | {"CHAINLIT_APP_ROOT": str(cwd)}
    r = subprocess.run([str(chat_venv.python(venv)), "-m", "tests.harness.history_layer_probe", mode, url],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_thread_of_200_messages_is_saved_in_order_and_opens_quickly(tmp_path, venv):
    got = probe(venv, tmp_path, "resume200", f"sqlite+aiosqlite:///{tmp_path / 'history.sqlite'}")
    assert got["steps"] == 200 and got["ordered"] and got["last"] == "（完）"  # the update merged into its row
    assert got["author"] == got["userIdentifier"] == "alice"  # what Chainlit compares with the logged-in user
    assert got["listed"] == [got["thread"]] and got["profile"] == "通用助手 General"
    assert got["intruder"] == [200, 200, "两百条消息", None]  # another user's session wrote nothing into it
    rated, changed, removed, after = got["feedback"]
    step = rated["forId"]
    assert rated == {"id": step, "forId": step, "value": 0, "comment": "不对"}  # shown again when the thread is opened
    assert changed == {"id": step, "forId": step, "value": 1, "comment": None} and removed is True and after is None
    first, median = got["seconds"][0], statistics.median(got["seconds"])
    print(f"\nget_thread of 200 messages (SQLite): first {first * 1000:.1f} ms, median of 5 {median * 1000:.1f} ms")
    assert median < 2.0, got["seconds"]


def test_database_unreachable_the_chat_goes_on_and_each_session_is_told_once(tmp_path, venv):
    url = f"postgresql+asyncpg://ernie:pw@127.0.0.1:{free_port()}/history"  # nothing listens there
    got = probe(venv, tmp_path, "down", url)
    assert [len(got["toasts"][s]) for s in ("s1", "s2")] == [1, 1], got["toasts"]
    assert got["toasts"]["s1"][0]["type"] == "warning" and "History is not being saved" in got["toasts"]["s1"][0]["message"]
    assert got["thread"] is None  # a thread that cannot be read is "not found": the chat starts fresh
    assert got["user"] == "alice" and got["listed"] == []  # logged in all the same; an empty sidebar
    assert got["author"] == 503  # whose thread it is cannot be checked: refused, not opened


def test_a_server_that_never_answers_costs_the_first_message_the_timeout_and_the_next_ones_nothing(tmp_path, venv):
    """A listening socket that never accepts: the kernel completes the connection, nothing answers, as a frozen
    server or a black-holed address behaves (the driver waits for its connect timeout, 1 s here). With the app's
    shared breaker the first message waits for it, the next nine do not (fails at once: < 1 s is 100x apart from
    the timeout's order of magnitude); the session is told once either way."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        url = f"postgresql+asyncpg://ernie:pw@127.0.0.1:{hole.getsockname()[1]}/history?timeout=1&command_timeout=1"
        got = probe(venv, tmp_path, "hung", url)
    with_breaker, without = got["with"]["seconds"], got["without"]["seconds"]
    print(f"\n10 messages saved, server never answering (connect timeout 1 s): no breaker {sum(without):.2f} s "
          f"(max {max(without) * 1000:.0f} ms), with the app's breaker {sum(with_breaker):.2f} s (first {with_breaker[0] * 1000:.0f} ms, "
          f"then max {max(with_breaker[1:]) * 1000:.1f} ms)")  # fmt: skip
    assert min(without) > 0.5, without  # each message waited for a connect timeout
    assert with_breaker[0] > 0.5 and max(with_breaker[1:]) < 0.5, with_breaker
    assert got["with"]["toasts"] == got["without"]["toasts"] == 1 and got["state"] == "open"
