"""The onboarding push log: one SQLite file under the state directory recording, per employee, each item
pushed (the welcome, each first-week task, each system guide) and when it was confirmed (已确认).

Rules it keeps (the chat app and a second session rely on them):
- An item is keyed (employee, item_id), UNIQUE. `push` inserts only what is not there yet (INSERT ... ON
  CONFLICT DO NOTHING) and returns the employee's items as stored, so a second session, a reload or a
  reconnect shows the same items, pushes nothing new and never changes the content of an item already
  pushed (the welcome the model wrote the first time stays the welcome).
- Every write is one `BEGIN IMMEDIATE ... COMMIT`: two sessions (threads or processes) pushing the same items
  at the same moment record each item once; a push that fails part-way (an item SQLite refuses: the table
  is STRICT and its text columns are ANY with CHECKs on typeof = 'text', so a number or bytes is refused,
  not silently converted; kind must be known, texts non-empty) is rolled back whole: nothing half-written.
- `confirm` is idempotent (the first confirmation's time is kept); an employee can confirm only their
  own items, and `items` returns only theirs. Another employee's item and an unknown one get the same
  sentence (the log does not tell one employee what another was pushed).

Concurrency and damage, as in docs/store.py: WAL journal, synchronous=NORMAL, busy_timeout 10 s; one
`PushLog` holds one connection guarded by a thread lock. Opening runs under an flock on `<file>.lock`;
a file that is not SQLite, or a SQLite database of another program (PRAGMA application_id), is a
PushLogError and left untouched; a damaged SQLite file (PRAGMA quick_check, or SQLite calls it malformed)
is kept aside as `<name>.corrupt-<UTC time>` (-wal/-shm alongside, via aside.keep_aside) and a fresh log
started; `PushLog.warnings` says so (items will be pushed again, unconfirmed). quick_check runs at every
open: the log is small (a few rows per employee). A schema newer than this code is a PushLogError.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files.sqlite_file import Kind, locked, open_database, os_problem

SCHEMA_VERSION = 1
APPLICATION_ID = 0x45524E50  # 'ERNP'
BUSY_TIMEOUT_MS = 10_000
KINDS = ("welcome", "task", "guide")

_SCHEMA = """
CREATE TABLE items (
    seq INTEGER PRIMARY KEY,
    employee ANY NOT NULL CONSTRAINT employee_is_text CHECK (typeof(employee) = 'text' AND length(trim(employee)) > 0),
    item_id ANY NOT NULL CONSTRAINT item_id_is_text CHECK (typeof(item_id) = 'text' AND length(item_id) > 0),
    kind ANY NOT NULL CONSTRAINT kind_is_known CHECK (kind IN ('welcome', 'task', 'guide')),
    content ANY NOT NULL CONSTRAINT content_is_text CHECK (typeof(content) = 'text' AND length(trim(content)) > 0),
    pushed_at TEXT NOT NULL,
    confirmed_at TEXT,
    UNIQUE (employee, item_id)
) STRICT
"""


class PushLogError(ErnieOpsError):
    """The push log cannot be opened, written, or was asked something it cannot do: one sentence."""


_KIND = Kind(
    name="onboarding push log", a_name="an onboarding push log", schema="push log schema", error=PushLogError,
    application_id=APPLICATION_ID, version=SCHEMA_VERSION, elsewhere="point the state directory elsewhere",
    upgrade="upgrade ernie-ops on this host", local_disk="put the state directory on a local disk",
    fresh="started an empty log: items will be pushed again and must be confirmed again",
)  # fmt: skip


@dataclass(frozen=True)
class NewItem:
    """An item to push: what plan.py produces once the welcome's text is written."""

    item_id: str
    kind: str
    content: str


@dataclass(frozen=True)
class Item:
    """An item as the log holds it; `confirmed_at` None = not yet 已确认."""

    employee: str
    item_id: str
    kind: str
    content: str
    pushed_at: str
    confirmed_at: str | None

    @property
    def confirmed(self) -> bool:
        return self.confirmed_at is not None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _os_error(path: Path, exc: OSError) -> PushLogError:
    return PushLogError(
        f"cannot open the onboarding push log {path}: {os_problem(exc, 'the state directory', 'point the state directory elsewhere')}"
    )


class PushLog:
    """The push log in one SQLite file; see the module docstring for the rules it keeps."""

    def __init__(self, path: str | Path, *, clock: Callable[[], str] = _now):
        self.path = Path(path)
        self.warnings: list[str] = []
        self._clock = clock
        self._lock = threading.RLock()
        try:
            self._conn = open_database(
                self.path, _KIND, create=lambda conn: conn.execute(_SCHEMA), busy_timeout_ms=BUSY_TIMEOUT_MS, busy=self._busy,
                warnings=self.warnings,
            )  # fmt: skip
        except OSError as exc:
            raise _os_error(self.path, exc) from None

    def _busy(self) -> PushLogError:
        return PushLogError(
            f"the onboarding push log {self.path} is busy: another process has been writing it "
            f"for over {BUSY_TIMEOUT_MS // 1000} s; try again"
        )

    def _sqlite_error(self, exc: sqlite3.Error) -> PushLogError:
        if locked(exc):
            return self._busy()
        text = str(exc)
        if "full" in text:
            return PushLogError(f"the onboarding push log {self.path} cannot grow: {text}; free space on its file system")
        if any(word in text for word in ("malformed", "not a database", "corrupt")):
            return PushLogError(
                f"the onboarding push log {self.path} is damaged ({text}); the next time it is opened it is kept aside as "
                f"{self.path.name}.corrupt-<UTC time> and an empty log started"
            )
        return PushLogError(f"the onboarding push log {self.path} failed: {text}; nothing was written")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> PushLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- transactions --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._sqlite_error(exc) from None
                raise

    def _select(self, conn: sqlite3.Connection, employee: str) -> list[Item]:
        rows = conn.execute(
            "SELECT employee, item_id, kind, content, pushed_at, confirmed_at FROM items WHERE employee = ? ORDER BY seq", (employee,)
        ).fetchall()
        return [Item(*row) for row in rows]

    # ---- the operations ------------------------------------------------------------------------
    def push(self, employee: str, items: Sequence[NewItem]) -> list[Item]:
        """Record the items not yet pushed to `employee` (all or none), and return all of theirs as stored, in push order."""
        return self.push_counted(employee, items)[0]

    def push_counted(self, employee: str, items: Sequence[NewItem]) -> tuple[list[Item], int]:
        """`push`, and how many items this call recorded (the others were there already, e.g. from another session)."""
        _employee(employee)
        pushed_at = self._clock()
        inserted = 0
        with self._write() as conn:
            for n, item in enumerate(items, 1):
                try:
                    inserted += conn.execute(
                        "INSERT INTO items (employee, item_id, kind, content, pushed_at) VALUES (?, ?, ?, ?, ?)"
                        " ON CONFLICT (employee, item_id) DO NOTHING",
                        (employee, item.item_id, item.kind, item.content, pushed_at),
                    ).rowcount
                except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError) as exc:
                    raise PushLogError(
                        f"item {n} ({getattr(item, 'item_id', item)!r}) for employee {employee!r} cannot be recorded ({exc}): "
                        f"it needs a non-empty text item_id, kind one of {', '.join(KINDS)} and non-empty text content; nothing was pushed"
                    ) from None
            return self._select(conn, employee), inserted

    def confirm(self, employee: str, item_id: str) -> Item:
        """Mark the employee's item 已确认 (again: no change, the first time is kept) and return it."""
        _employee(employee)
        with self._write() as conn:
            conn.execute(
                "UPDATE items SET confirmed_at = ? WHERE employee = ? AND item_id = ? AND confirmed_at IS NULL",
                (self._clock(), employee, item_id),
            )
            row = conn.execute(
                "SELECT employee, item_id, kind, content, pushed_at, confirmed_at FROM items WHERE employee = ? AND item_id = ?",
                (employee, item_id),
            ).fetchone()
        if row is None:
            raise PushLogError(f"employee {employee!r} has no pushed item {item_id!r} to confirm; reload the page to see your items")
        return Item(*row)

    def items(self, employee: str) -> list[Item]:
        """The employee's items, in push order (only theirs)."""
        _employee(employee)
        with self._lock:
            try:
                return self._select(self._conn, employee)
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None


def _employee(employee: object) -> None:
    if not isinstance(employee, str) or not employee.strip():
        raise PushLogError(f"the employee {employee!r} is not a valid employee id: it must be a non-empty text; check the HR record")
