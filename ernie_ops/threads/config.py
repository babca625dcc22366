"""The `chat.history` section of the config file: where conversations are kept and for how long."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ernie_ops.config_section import Section


class HistoryConfig(Section):
    """Conversations persisted per user (thread list, resume, uploads, feedback)."""

    enabled: bool = Field(True, description="on by default: a reload or an app restart must not lose a conversation")
    backend: Literal["sqlite", "postgresql"] = Field(
        "sqlite", description="sqlite: one chat host, no server to run; postgresql: several chat hosts share one database"
    )
    sqlite_file: str = Field(
        "/var/lib/ernie-ops-chat/history.sqlite", min_length=1, description="in the chat app's state dir, beside chat.docs.index_file"
    )
    database_url_env: str = Field(
        "ERNIE_OPS_CHAT_DATABASE_URL",
        pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="postgresql: the variable holding the URL (password included), set in /etc/ernie-ops/chat.env, never in the YAML",
    )
    retention_days: int | None = Field(
        None, ge=1, le=36500, description="null keeps every thread (deleting people's conversations is the operator's choice)"
    )
