"""What a failed browser test leaves for a person to see why: a screenshot of the page, its HTML, the websocket
frames it last received, and the chat app's and the engines' journals of each host involved (under
$ERNIE_OPS_ARTIFACTS/...)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.harness import host


def keep_failure(chat, hosts: dict, where: Path) -> list[Path]:
    """The page (screenshot, HTML, last frames) when a ChatPage is open, and the chat app's and the engines' journals
    of each host in `hosts` (name -> sandbox)."""
    where.mkdir(parents=True, exist_ok=True)
    saved = []
    if chat is not None:
        chat.page.screenshot(path=str(where / "page.png"), full_page=True)
        (where / "page.html").write_text(chat.page.content(), encoding="utf-8")
        (where / "frames.txt").write_text(chat.frames_seen(), encoding="utf-8")
        saved += [where / "page.png", where / "page.html", where / "frames.txt"]
    for name, sb in hosts.items():
        journal = sb.run(["journalctl", "--no-pager", "-u", host.CHAT_UNIT, "-n", "400"], check=False).stdout
        (where / f"chat-journal-{name}.txt").write_text(journal, encoding="utf-8")
        # the engines' own lines (a watchdog restart, a crash): a fresh clone's failure once lacked what only they could tell
        engines = sb.run(["journalctl", "--no-pager", "-u", "ernie-vllm@*", "-n", "400"], check=False).stdout
        (where / f"engine-journal-{name}.txt").write_text(engines, encoding="utf-8")
        saved += [where / f"chat-journal-{name}.txt", where / f"engine-journal-{name}.txt"]
    return saved


class Kept:
    """What `kept_on_failure` keeps: set `chat` once the page is open."""

    chat = None


@contextlib.contextmanager
def kept_on_failure(hosts: dict, where: Path) -> Iterator[Kept]:
    """Around a browser session inside a test (not a fixture the UI tier's report hook sees): on any failure, keep
    the page (once the test set `.chat`) and the hosts' journals, name where in the failure, and re-raise it.
    Enter it after the browser, so that it runs while the page is still open."""
    kept = Kept()
    try:
        yield kept
    except BaseException as exc:
        try:
            saved = keep_failure(kept.chat, hosts, where)
            exc.add_note("kept for this failure: " + ", ".join(str(p) for p in saved))
        except Exception as keep_exc:  # the test's own failure is what counts; this only adds to it
            exc.add_note(f"(could not keep the page and journals: {keep_exc})")
        raise
