"""A thread's page reloaded resumes its thread, even when the page's first websocket closed before it began.

Chainlit 2.12's page connects through a 200 ms debounce that a new callback does not cancel: when its state (chat
profile, thread to resume) settles in two steps, two connects fire, and the page closes the first socket as soon as
it opens the second. On a busy machine the first has not sent `connection_successful` by then, but the server made
the session on its connect; the second socket, with the same session id, restores that session, and Chainlit's
`connection_successful` runs `on_chat_start` for a restored session without a first interaction, never looking at
the thread both sockets asked for: a new chat on the thread's page (CI: a reload that did not resume).

A session that never began (no chat start, no resume) has nothing to restore: this hands it to Chainlit's own
handler as a new one, which resumes the thread it asked for (its owner was checked on this socket's connect).
Reproduced by tests/harness/resume_race.py (tests/integration/test_chat_app.py).
"""

from __future__ import annotations

from chainlit import socket as chainlit_socket
from chainlit.session import WebsocketSession


def never_began(session: WebsocketSession) -> bool:
    """A restored session that asked for a thread but never ran on_chat_start nor resumed: its socket closed first."""
    return bool(session.restored and session.thread_id_to_resume and not session.has_first_interaction and not session.chat_started)


def install() -> None:
    """Chainlit's `connection_successful` handler, behind one check (python-socketio keeps one handler an event)."""
    chainlit_handler = chainlit_socket.connection_successful

    async def connection_successful(sid: str) -> None:
        session = WebsocketSession.get(sid)
        if session is not None and never_began(session):
            session.restored = False
        await chainlit_handler(sid)

    chainlit_socket.sio.on("connection_successful")(connection_successful)
