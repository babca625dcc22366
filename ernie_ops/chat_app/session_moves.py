"""A chat session that moves to a new websocket before its first interaction still gets its start there.

Chainlit 2.12's page connects through a 200 ms debounce that a new callback does not cancel: when its state (chat
profile, thread to resume) settles in two steps, two connects fire with one session id, and the page closes the first
socket as soon as it opens the second, which restores the session. Chainlit's `connection_successful` then looks only
at whether on_chat_start ever ran, and two cases went wrong on a busy machine:

- the first socket closed before it began: on a thread's page, Chainlit ran on_chat_start for the restored session
  and never looked at the thread both sockets asked for (CI: a reload that opened a new chat). Such a session has
  nothing to restore: it is handed to Chainlit as a new one, which resumes the thread (its owner was checked on
  this socket's connect);
- the first socket began: on_chat_start ran (or still runs) for it, and what it showed went to a socket the page
  had dropped (CI: no Marketing form, no Docs collections, a page waiting for a start that never came). Chainlit
  runs on_chat_start again on the new socket: a start still running is cancelled first, and the app's start
  removes what an earlier run showed, so a page that kept it shows it once.

Both are played by tests/harness/resume_race.py (tests/integration/test_chat_app.py).
"""

from __future__ import annotations

from chainlit import socket as chainlit_socket
from chainlit.session import WebsocketSession


def never_began(session: WebsocketSession) -> bool:
    """A restored session that asked for a thread but never ran on_chat_start nor resumed: its socket closed first."""
    return bool(session.restored and session.thread_id_to_resume and not session.has_first_interaction and not session.chat_started)


def started_elsewhere(session: WebsocketSession) -> bool:
    """A restored session whose on_chat_start ran for an earlier socket, with no interaction since."""
    return bool(session.restored and session.chat_started and not session.has_first_interaction)


def install() -> None:
    """Chainlit's `connection_successful` handler, behind these checks (python-socketio keeps one handler an event)."""
    chainlit_handler = chainlit_socket.connection_successful

    async def connection_successful(sid: str) -> None:
        session = WebsocketSession.get(sid)
        if session is not None and never_began(session):
            session.restored = False
        elif session is not None and started_elsewhere(session):
            if session.current_task is not None and not session.current_task.done():
                session.current_task.cancel()
            session.chat_started = False  # Chainlit's handler runs on_chat_start again, on this socket
        await chainlit_handler(sid)

    chainlit_socket.sio.on("connection_successful")(connection_successful)
