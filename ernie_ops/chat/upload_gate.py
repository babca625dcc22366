"""Whether the app takes one more uploaded file, decided before Chainlit reads it.

Chainlit's own `POST /project/file` checks a global switch and a size only: a scenario whose paper clip was hidden
still took files, any number, into memory and (with history) into the database (issue 34). The app's route asks
`refusal` first. `Pending` counts the files taken but not settled yet (their bytes sit in the session's directory,
not yet in the history): with the bytes the history holds for the user, that is what the quota compares, so a
user cannot pass it by uploading faster than the app answers. A file is settled when the app keeps it with its
thread or drops it (a refused document), or when its session ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ernie_ops.chat.config import ScenarioConfig

MB = 1024 * 1024


class Refusal(NamedTuple):
    status: int  # the HTTP status the route answers: 403 a scenario that takes no files, 413 over the quota
    sentence: str


def refusal(scenario: ScenarioConfig, *, asked: bool, size: int, held: int, quota_mb: float) -> Refusal | None:
    """Why a refused upload is refused (None: take it). `asked`: the app asked for files (AskFileMessage);
    `held`: the user's bytes already stored or pending; `size`: this file's."""
    if not asked and not scenario.takes_files:
        return Refusal(403, f"「{scenario.name}」不读取文件。 / {scenario.name} reads no files: use a scenario that does (Docs).")
    quota = int(quota_mb * MB)
    if held + size > quota:
        return Refusal(413, (
            f"上传配额已满：已存 {readable(held)}，配额 {quota_mb:g} MB。请删除旧对话后再上传。 / "
            f"Your files fill your quota: {readable(held)} held, this one {readable(size)}, the quota "
            f"{quota_mb:g} MB (chat.upload_quota_mb). Delete old conversations to make room."
        ))  # fmt: skip
    return None


def readable(size: int) -> str:
    """A size for a sentence: MB from 0.1 MB on, KB below."""
    return f"{size / MB:.1f} MB" if size >= MB // 10 else f"{max(1, round(size / 1024))} KB"


@dataclass
class Pending:
    """Files taken by the upload route and not settled yet: {session id: {file id: (user, bytes)}}."""

    sessions: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)

    def add(self, session: str, user: str, file_id: str, size: int) -> None:
        self.sessions.setdefault(session, {})[file_id] = (user, size)

    def settle(self, session: str, file_ids: list[str]) -> None:
        """Kept or dropped: no longer pending (a kept file's bytes now count in the history)."""
        files = self.sessions.get(session, {})
        for file_id in file_ids:
            files.pop(file_id, None)
        if not files:
            self.sessions.pop(session, None)

    def end(self, session: str) -> None:
        """The session ended: Chainlit removes its directory, and the files in it with it."""
        self.sessions.pop(session, None)

    def bytes_of(self, user: str) -> int:
        return sum(size for files in self.sessions.values() for who, size in files.values() if who == user)
