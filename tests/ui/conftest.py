"""Every failed UI test leaves what a person needs to see why: a screenshot of the page, the page's HTML, the chat
app's journal and the websocket frames the page last received, under $ERNIE_OPS_ARTIFACTS/ui/failed/<test>/."""

from __future__ import annotations

import re

import pytest

from tests.harness import host
from tests.harness.paths import ARTIFACTS

FAILED = ARTIFACTS / "ui" / "failed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and report.when in ("setup", "call"):
        where = FAILED / re.sub(r"[^\w.-]+", "_", item.name)
        try:
            saved = keep_failure(item.funcargs.get("chat"), item.funcargs.get("sb"), where)
        except Exception as exc:  # the test's own failure is what the report shows; this only adds to it
            saved = [f"(could not keep the page and journal: {exc})"]
        if saved:
            report.sections.append(("kept for this failure", "\n".join(str(p) for p in saved)))
    return report


def keep_failure(chat, sb, where) -> list:
    """The page (screenshot, HTML, last frames) when a ChatPage is open, and the app's journal when a host is."""
    where.mkdir(parents=True, exist_ok=True)
    saved = []
    if chat is not None:
        chat.page.screenshot(path=str(where / "page.png"), full_page=True)
        (where / "page.html").write_text(chat.page.content(), encoding="utf-8")
        (where / "frames.txt").write_text(chat.frames_seen(), encoding="utf-8")
        saved += [where / "page.png", where / "page.html", where / "frames.txt"]
    if sb is not None:
        journal = sb.run(["journalctl", "--no-pager", "-u", host.CHAT_UNIT, "-n", "400"], check=False).stdout
        (where / "chat-journal.txt").write_text(journal, encoding="utf-8")
        saved.append(where / "chat-journal.txt")
    return saved
