"""From config and environment to an async engine over a migrated history database.

`sqlite+aiosqlite:///<path>` on one chat host (the default, under the app's state directory) or
`postgresql+asyncpg://...` for several chat hosts sharing one server (the URL, password included, comes
from an environment variable set in /etc/ernie-ops/chat.env, never from the YAML).

Why not Chainlit's SQLAlchemyDataLayer: its tables must be created by hand and it has no migrations; its
SQL is static text written for PostgreSQL (Chainlit/chainlit#2288), its JSON columns misbehaved on SQLite
(Chainlit/chainlit#1817), and it dropped its foreign keys because Chainlit may save a step before the
thread it belongs to (Chainlit/chainlit#836). Here the project owns the schema, versioned and migrated at
start, and a step saved first creates its thread.

SQLite: before the engine opens it, the file is checked under a lock (files.sqlite_file): a file that is not
SQLite, or another program's database, is refused and left alone; a damaged one is kept aside
(`<name>.corrupt-<UTC time>`, never overwritten, with its -wal/-shm) and a fresh one started, saying so in
the log. Writes take the database lock at BEGIN (BEGIN IMMEDIATE), so two writers (the app and an
`ernie-ops chat-user remove`) wait for each other instead of failing on a lock upgrade; reads take none
(WAL: a thread list is never held up by a long deletion).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ernie_ops.errors import UsageError
from ernie_ops.files.aside import keep_aside
from ernie_ops.files.sqlite_file import SQLITE_HEADER, connect, damage, flock, is_damage, locked, os_problem
from ernie_ops.threads import schema
from ernie_ops.threads.errors import HistorySchemaError, HistoryUnavailable

log = logging.getLogger("ernie_ops.threads")

APPLICATION_ID = 0x45524854  # "ERHT": PRAGMA application_id of a history file
BUSY_TIMEOUT_MS = 10_000
ENV_FILE = "/etc/ernie-ops/chat.env"  # the chat unit's EnvironmentFile
READ_ONLY = "history_read_only"  # execution option of the store's reads (see _sqlite_connection_setup)
PG_LOCK_KEY = 0x45524854  # pg_advisory_xact_lock: one chat host migrates at a time
PG_INSUFFICIENT_PRIVILEGE = "42501"  # SQLSTATE of "permission denied"
# asyncpg's timeouts, in seconds; the URL's `?timeout=S&command_timeout=S` overrides them (chat.env).
PG_CONNECT_TIMEOUT_S = 10.0  # asyncpg's default, 60 s, holds a thread list or a save that long when the server is gone
PG_COMMAND_TIMEOUT_S = 30.0  # asyncpg's default is none: a server that stops answering hangs every history call forever
PG_TIMEOUTS = {"timeout": PG_CONNECT_TIMEOUT_S, "command_timeout": PG_COMMAND_TIMEOUT_S}


def database_url(history, environ: Mapping[str, str] | None = None) -> str:
    """The SQLAlchemy URL for `chat.history` (a HistoryConfig): the SQLite file's, or the PostgreSQL URL from
    the environment variable `database_url_env` (postgresql:// is given the asyncpg driver)."""
    environ = os.environ if environ is None else environ
    if history.backend == "sqlite":
        return str(URL.create("sqlite+aiosqlite", database=str(Path(history.sqlite_file).expanduser().absolute())))
    name = history.database_url_env
    text = environ.get(name, "").strip()
    where = f"set {name} in {ENV_FILE} (the chat unit's environment) to postgresql://USER:PASSWORD@HOST:5432/DATABASE"
    if not text:
        raise UsageError(f"chat.history.backend is postgresql but {name} is not set; {where}")
    try:
        url = make_url(text)
    except ArgumentError:
        url = None
    if url is None or url.drivername not in ("postgresql", "postgres", "postgresql+asyncpg") or not url.database:
        shown = url.render_as_string(hide_password=True) if url is not None else "a value that is not a URL"
        raise UsageError(f"{name} holds {shown}, not a postgresql:// URL with a database name; {where}")
    return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def shown(url: str | URL) -> str:
    """The URL without its password, for messages and logs."""
    url = make_url(url)
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return url.render_as_string(hide_password=True)


def prepare_sqlite_file(path: Path) -> str | None:
    """Make `path` ready for the engine: refuse what is not a history file, keep a damaged one aside and start
    afresh (the sentence saying so is logged and returned), WAL for a new one. Raises HistorySchemaError or
    HistoryUnavailable (a directory that cannot be created or written)."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = [p for p in (path, lock) if not p.exists()]
        with flock(lock):
            kept = _check_file(path)
            conn = connect(path, BUSY_TIMEOUT_MS)
            try:
                if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
                    raise HistorySchemaError(
                        f"the chat history {path} cannot use a WAL journal (is it on a network file system?); "
                        "set chat.history.sqlite_file to a file on a local disk"
                    )
                if conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            finally:
                conn.close()
            _own_like_directory([*new, path] if kept else new)
    except OSError as exc:
        raise HistoryUnavailable(
            f"cannot open the chat history {path}: "
            f"{os_problem(exc, 'chat.history.sqlite_file', 'set chat.history.sqlite_file to another file')}"
        ) from None
    except sqlite3.DatabaseError as exc:
        if locked(exc):
            raise HistoryUnavailable(
                f"the chat history {path} is busy: another process held its write lock past {BUSY_TIMEOUT_MS / 1000:g} s; "
                "nothing was moved, try again when it is done"
            ) from None
        raise HistoryUnavailable(f"cannot open the chat history {path}: {exc}; nothing was moved") from None
    if kept:
        log.warning(kept)
    return kept


def _own_like_directory(paths: list[Path]) -> None:
    """Files root created for the app (an `ernie-ops chat ...` command run by the operator) get the owner of
    their directory, the chat app's state dir, so the app can still open them."""
    if os.geteuid() != 0:
        return
    for p in paths:
        owner = p.parent.stat()
        if p.exists() and p.stat().st_uid != owner.st_uid:
            os.chown(p, owner.st_uid, owner.st_gid)


def existing_url(history, environ: Mapping[str, str] | None = None) -> str | None:
    """`database_url`, or None when the SQLite file does not exist yet (a report or a deletion by the
    operator has nothing to read and must not create the app's file)."""
    url = database_url(history, environ)
    if history.backend == "sqlite" and not Path(make_url(url).database).exists():
        return None
    return url


def _check_file(path: Path) -> str | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        raise HistorySchemaError(
            f"{path} is not a SQLite database, so it is not a chat history; move it away or set chat.history.sqlite_file to another file"
        )
    conn = connect(path, BUSY_TIMEOUT_MS)
    try:
        problem = damage(conn)
        if problem is None:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            if tables and app_id != APPLICATION_ID:
                raise HistorySchemaError(
                    f"{path} is a SQLite database of another program, not a chat history; set chat.history.sqlite_file to another file"
                )
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):  # busy, locked, I/O: says nothing of the file, which stays where it is
            raise
        problem = str(exc)
    finally:
        conn.close()
    if problem is None:
        return None
    aside = keep_aside(path, ("-wal", "-shm"))
    return f"the chat history {path} was damaged ({problem}); kept it as {aside} and started an empty history"


def _sqlite_connection_setup(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below), pysqlite must not
        cur = dbapi_conn.cursor()
        for pragma in (f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}", "PRAGMA foreign_keys = ON", "PRAGMA synchronous = NORMAL"):
            cur.execute(pragma)
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn) -> None:
        # a write takes the lock at BEGIN; a read (READ_ONLY) reads its WAL snapshot without waiting for writers
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def _json(value) -> str:
    """Chinese text as itself, not \\uXXXX escapes (a third of the bytes of a stored conversation)."""
    return json.dumps(value, ensure_ascii=False)


def create_engine(url: str) -> tuple[AsyncEngine, str | None]:
    """The engine for `url` (its SQLite file prepared first) and the sentence about a damaged file kept aside."""
    parsed = make_url(url)
    kept = None
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise UsageError("the chat history needs a SQLite file, not an in-memory database")
        kept = prepare_sqlite_file(Path(parsed.database))
        engine = create_async_engine(parsed, json_serializer=_json)
        _sqlite_connection_setup(engine)
    else:
        parsed, timeouts = pg_timeouts(parsed)
        engine = create_async_engine(parsed, pool_pre_ping=True, pool_recycle=1800, connect_args=timeouts, json_serializer=_json)
    return engine, kept


def pg_timeouts(url: URL) -> tuple[URL, dict[str, float]]:
    """The URL without its timeout parameters, and asyncpg's connect and command timeouts: the URL's, else ours.
    (SQLAlchemy hands URL parameters to asyncpg as text, which asyncpg cannot use as a number of seconds.)"""
    found: dict[str, float] = {}
    for key, default in PG_TIMEOUTS.items():
        text = url.query.get(key)
        if text is None:
            found[key] = default
            continue
        try:
            found[key] = float(text) if isinstance(text, str) else float("nan")
        except ValueError:
            found[key] = float("nan")
        if not found[key] > 0:
            raise UsageError(
                f"the chat history URL {shown(url)} has {key}={text}, which is not a number of seconds above 0; "
                f"write e.g. {key}={default:g}, or leave it out for {default:g} s"
            )
    return url.difference_update_query(PG_TIMEOUTS), found


def schema_state(conn: Connection) -> tuple[int, list[str]]:
    """(the database's schema version, 0 when it has none; the data tables present)."""
    names = set(sa.inspect(conn).get_table_names())
    present = [t for t in schema.TABLES if t in names]
    if "schema_version" not in names:
        return 0, present
    version = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar()
    return int(version or 0), present


def migrate(conn: Connection, where: str, now) -> int:
    """Bring the database to `schema.CURRENT` inside the caller's transaction; returns the version found."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
    version, present = schema_state(conn)
    if version > schema.CURRENT:
        raise HistorySchemaError(
            f"the chat history database {where} has schema version {version} and this ernie-ops knows only up to "
            f"{schema.CURRENT}; upgrade ernie-ops on this host to the version the other chat hosts run, "
            "or point chat.history at another database"
        )
    if version == 0 and present:
        raise HistorySchemaError(
            f"the chat history database {where} already has tables ({', '.join(present)}) that ernie-ops did not make; "
            "point chat.history at an empty database"
        )
    try:
        if version == 0:
            schema.METADATA.create_all(conn, tables=[schema.schema_version])
        for m in schema.MIGRATIONS:
            if m.version > version:
                m.apply(conn)
                conn.execute(sa.insert(schema.schema_version).values(version=m.version, applied_at=now(), description=m.description))
                log.info("chat history %s: schema migrated to version %d (%s)", where, m.version, m.description)
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == PG_INSUFFICIENT_PRIVILEGE:
            raise HistorySchemaError(_not_allowed_to_migrate(conn, where, exc)) from None
        raise
    return version


def _not_allowed_to_migrate(conn: Connection, where: str, exc: sa.exc.DBAPIError) -> str:
    """PostgreSQL 15 and later let only the database's owner create tables in its `public` schema: an operator's
    server where the chat's role was only granted CONNECT fails here."""
    url = conn.engine.url
    role, database = url.username or "the chat's role", url.database or "the database"
    reason = str(exc.orig).strip().splitlines()[0]
    return (
        f"the chat history database {where} does not let {role} create its tables ({reason}); "
        f"make {role} the database's owner (ALTER DATABASE {database} OWNER TO {role}) "
        f"or grant it the schema (GRANT USAGE, CREATE ON SCHEMA public TO {role})"
    )
