"""Logins that end with their user (issue 34): a removed user, or one whose password was changed, is logged out at
their next request, not when the signed token expires (chat.session_timeout_seconds, days by default).

The token Chainlit signs at login carries, in the user's metadata, a fingerprint of the password hash it was issued
for (`users.fingerprint`). This ASGI middleware checks every request and websocket that carries a token, on the
routes that need a login, against the users file as it is now (re-read when the file changes): no such user, or
another hash, is 401 with the cookie cleared (a websocket is closed before it is accepted). A token without the
fingerprint (issued before this check existed) is treated the same: one more login after the upgrade.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from http.cookies import SimpleCookie
from pathlib import Path

import jwt

from ernie_ops.chat import users
from ernie_ops.errors import ConfigError

log = logging.getLogger("ernie_ops.chat")

PROTECTED = ("/user", "/project", "/ws/", "/history/", "/feedback")  # what needs a login; /login, /logout and the page do not
COOKIE = os.environ.get("CHAINLIT_AUTH_COOKIE_NAME", "access_token")  # Chainlit's own name for it (chainlit/auth/cookie.py)


def still_valid(claims: dict, current: Callable[[str], str | None]) -> bool:
    """The token's user is in the users file with the hash the token was issued for."""
    name = claims.get("identifier")
    issued_for = (claims.get("metadata") or {}).get("credential")
    return bool(name) and issued_for is not None and issued_for == current(str(name))


class Credentials:
    """The users file's fingerprints, re-read when its size or mtime changes."""

    def __init__(self, path: str):
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._known: dict[str, str] = {}

    def __call__(self, name: str) -> str | None:
        try:
            st = Path(self.path).stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                self._known, self._stamp = users.credentials(self.path), stamp
        except (OSError, ConfigError) as exc:  # an unreadable users file logs nobody in (login says why): nobody stays
            log.error("sessions: the users file cannot be read, so no session is valid: %s", exc)
            self._known, self._stamp = {}, None
        return self._known.get(name)


def _token(scope: dict) -> str | None:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header: no token here, Chainlit decides
        return None
    parts = {k: m.value for k, m in cookie.items()}
    if COOKIE in parts:
        return parts[COOKIE]
    chunks = [parts.get(f"{COOKIE}_{i}") for i in range(len(parts))]
    joined = "".join(c for c in chunks if c) if chunks and chunks[0] else ""
    return joined or None


class RevokedSessions:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app, users_file: str, root_path: str = "", secret: str | None = None):
        self.app = app
        self.prefixes = tuple(root_path.rstrip("/") + p for p in PROTECTED)
        self.credentials = Credentials(users_file)
        self.secret = secret or os.environ.get("CHAINLIT_AUTH_SECRET", "")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or not scope.get("path", "").startswith(self.prefixes):
            return await self.app(scope, receive, send)
        token = _token(scope)
        if token is not None:
            try:
                claims = jwt.decode(token, self.secret, algorithms=["HS256"])
            except jwt.InvalidTokenError:
                claims = None  # Chainlit refuses it on its own
            if claims is not None and not still_valid(claims, self.credentials):
                log.info("sessions: %r logged out: removed from the users file, or its password changed", claims.get("identifier"))
                return await _refuse(scope, send)
        return await self.app(scope, receive, send)


async def _refuse(scope, send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4401})
        return
    body = b'{"detail":"Session ended: log in again"}'
    expired = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly".encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"set-cookie", expired)]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
