"""The history's tables (SQLAlchemy Core, the same on SQLite and PostgreSQL) and the migrations that build them.

Chainlit's own dicts (StepDict, ElementDict, thread metadata) are kept whole as JSON, with only what the
store queries by (ids, the thread's user, times, the order of steps) in columns of their own: a Chainlit
upgrade that adds a key changes no table. Times are timezone-aware and set by the store (its injectable
clock); on SQLite they are stored as fixed-width UTC text, so comparing and ordering them as text is
comparing them as times.

Versions: `schema_version` holds one row per migration applied. `MIGRATIONS` is ordered; migration n takes a
database at version n-1 to n, inside the transaction that records it. A migration, once released, never
changes: the next change to the tables is a new migration (v1 builds the tables as `METADATA` describes
them today; when a v2 alters them, v1 keeps its own frozen copy of these definitions). A unit test holds the
schema each version builds (tests/unit/data/history_schema_v<N>.sqlite.sql) and fails on a change without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection


class UTCDateTime(sa.types.TypeDecorator):
    """A timezone-aware datetime in, a UTC datetime out, on every backend (SQLite keeps no zone itself)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the history stores aware times only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Json = sa.JSON(none_as_null=True)
Id = sa.String(255)  # Chainlit's ids are UUIDs; room for other string ids

METADATA = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    METADATA,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("applied_at", UTCDateTime, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
)

users = sa.Table(
    "users",
    METADATA,
    sa.Column("id", Id, primary_key=True),
    sa.Column("identifier", sa.String(255), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("metadata", Json, nullable=False),
)

threads = sa.Table(
    "threads",
    METADATA,
    sa.Column("id", Id, primary_key=True),
    sa.Column("user_identifier", sa.String(255), nullable=True),  # the owner's login name; never changes once set
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),  # the last write to the thread or anything in it
    sa.Column("metadata", Json, nullable=False),
    sa.Column("tags", Json, nullable=False),
    sa.Index("threads_user_updated", "user_identifier", "updated_at"),
    sa.Index("threads_updated", "updated_at"),
)

steps = sa.Table(
    "steps",
    METADATA,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # insertion order breaks createdAt ties
    sa.Column("id", Id, nullable=False, unique=True),
    sa.Column("thread_id", Id, sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.Column("created_at", sa.String(64), nullable=False),  # Chainlit's createdAt (ISO 8601 UTC text); '' if none
    sa.Column("type", sa.String(64), nullable=True),
    sa.Column("data", Json, nullable=False),  # the StepDict, merged across updates
    sa.Index("steps_thread_order", "thread_id", "created_at", "seq"),
)

elements = sa.Table(
    "elements",
    METADATA,
    sa.Column("id", Id, primary_key=True),
    sa.Column("thread_id", Id, sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.Column("for_id", Id, nullable=True),  # the step the element is shown with
    sa.Column("data", Json, nullable=False),  # the ElementDict
    sa.Column("content", sa.LargeBinary, nullable=True),  # the bytes (uploads), shared by every chat host
    sa.Index("elements_thread", "thread_id"),
    sa.Index("elements_for", "for_id"),
)

feedback = sa.Table(
    "feedback",
    METADATA,
    sa.Column("id", Id, primary_key=True),
    sa.Column("thread_id", Id, sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.Column("step_id", Id, nullable=False),
    sa.Column("value", sa.Integer, nullable=False),
    sa.Column("comment", sa.Text, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Index("feedback_updated", "updated_at"),
    sa.Index("feedback_step", "step_id"),
)

TABLES = ("users", "threads", "steps", "elements", "feedback")  # the data tables (schema_version apart)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _v1(conn: Connection) -> None:
    METADATA.create_all(conn, tables=[users, threads, steps, elements, feedback])


MIGRATIONS: tuple[Migration, ...] = (Migration(1, "users, threads, steps, elements (with bytes), feedback", _v1),)
CURRENT = MIGRATIONS[-1].version
