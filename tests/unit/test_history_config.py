"""`chat.history`: defaults, bad values located, and the database URL built from config and environment
(a PostgreSQL password only ever from the environment)."""

from __future__ import annotations

import pytest

from ernie_ops import config
from ernie_ops.errors import ConfigError, UsageError
from ernie_ops.threads.database import database_url, shown


def history(text: str = ""):
    return config.parse(text, "ernie.yaml").chat.history


def test_defaults_keep_every_thread_in_sqlite_under_the_state_dir():
    h = history()
    assert (h.enabled, h.backend, h.retention_days) == (True, "sqlite", None)
    assert h.sqlite_file == "/var/lib/ernie-ops-chat/history.sqlite"
    assert h.database_url_env == "ERNIE_OPS_CHAT_DATABASE_URL"
    assert database_url(h, {}) == "sqlite+aiosqlite:////var/lib/ernie-ops-chat/history.sqlite"


def test_bad_values_name_line_field_and_value():
    text = "chat:\n  history:\n    backend: mysql\n    retention_days: 0\n    database_url_env: lower-case\n    password: x\n"
    with pytest.raises(ConfigError) as info:
        config.parse(text, "ernie.yaml")
    found = {p.field: p for p in info.value.problems}
    assert set(found) == {
        "chat.history.backend",
        "chat.history.retention_days",
        "chat.history.database_url_env",
        "chat.history.password",
    }
    assert found["chat.history.backend"].line == 3 and found["chat.history.backend"].value == "mysql"
    assert found["chat.history.retention_days"].line == 4 and found["chat.history.retention_days"].value == 0


def test_a_relative_sqlite_file_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    h = history("chat:\n  history:\n    sqlite_file: state/h.sqlite\n")
    assert database_url(h, {}) == f"sqlite+aiosqlite:///{tmp_path}/state/h.sqlite"


def test_postgresql_takes_its_url_from_the_named_variable_with_the_asyncpg_driver():
    h = history("chat:\n  history:\n    backend: postgresql\n    database_url_env: CHAT_DB\n")
    for given in (
        "postgresql://chat:s3cret@db.lan:5432/chat",
        "postgres://chat:s3cret@db.lan:5432/chat",
        "postgresql+asyncpg://chat:s3cret@db.lan:5432/chat",
    ):
        assert database_url(h, {"CHAT_DB": given}) == "postgresql+asyncpg://chat:s3cret@db.lan:5432/chat"
    assert shown("postgresql+asyncpg://chat:s3cret@db.lan:5432/chat") == "postgresql+asyncpg://chat:***@db.lan:5432/chat"


@pytest.mark.parametrize(
    "value, says",
    [
        (None, "CHAT_DB is not set"),
        ("  ", "CHAT_DB is not set"),
        ("mysql://chat:s3cret@db/chat", "CHAT_DB holds mysql://chat:***@db/chat, not a postgresql:// URL"),
        ("postgresql://chat:s3cret@db.lan:5432", "CHAT_DB holds postgresql://chat:***@db.lan:5432, not a postgresql:// URL with a"),
        ("db.lan:5432/chat", "CHAT_DB holds a value that is not a URL, not a postgresql:// URL"),
    ],
)
def test_a_missing_or_wrong_postgresql_url_names_the_variable_and_the_env_file(value, says):
    h = history("chat:\n  history:\n    backend: postgresql\n    database_url_env: CHAT_DB\n")
    environ = {} if value is None else {"CHAT_DB": value}
    with pytest.raises(UsageError) as caught:
        database_url(h, environ)
    message = str(caught.value)
    assert says in message and "/etc/ernie-ops/chat.env" in message and "s3cret" not in message
