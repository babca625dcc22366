"""The history's failures, each an ErnieOpsError the CLI prints as one sentence (exit code 1)."""

from __future__ import annotations

from ernie_ops.errors import ErnieOpsError


class HistoryError(ErnieOpsError):
    """Something about the chat history cannot be done as asked (an unknown step, a cursor that is not ours)."""


class HistoryUnavailable(HistoryError):
    """The history database cannot be reached or refused a read or write; the chat can go on without it."""


class HistorySchemaError(HistoryError):
    """The database is not one this ernie-ops can use: a newer schema, another program's tables, not SQLite."""
