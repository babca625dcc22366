"""Runs in the chat venv (python-socketio is there): a logged-in user who uploads where the page offers no paper clip,
sends a file the app refuses, and fills the upload quota, through the app's own routes and websocket as the
browser uses them. Prints one JSON object. Called by tests/integration/test_chat_app.py.

    python -m tests.harness.upload_attacker URL USER PASSWORD

Each session is a socket.io connection with the page's auth (its chat profile picks the scenario); a file is posted
to `/project/file?session_id=...` and sent with a message as the browser does (`client_message` with
`fileReferences`). The working directory must be a scratch dir (importing Chainlit's client writes nothing, but
ernie_ops is imported from the checkout).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime

import httpx
import socketio

ONBOARDING, DOCS = "入职助手 Onboarding", "文档问答 Docs"
GOOD = ("runbook.md", "# 回滚\n\n回滚时恢复 /srv/app 目录，然后重启服务。\n".encode(), "text/markdown")
BROKEN = ("report.pdf", b"%PDF-1.4\nthis is no pdf at all\n", "application/pdf")


class Session:
    """One page: its websocket session and what the app sent it."""

    def __init__(self, url: str, cookie: str, profile: str):
        self.url, self.cookie, self.profile = url, cookie, profile
        self.id = str(uuid.uuid4())
        self.sio = socketio.AsyncClient(reconnection=False)
        self.messages: list[dict] = []
        self.idle = asyncio.Event()
        self.said = 0  # a send waits for this many worded messages, then for the task_end that follows them
        self.sio.on("new_message", self._message)
        self.sio.on("update_message", self._message)
        self.sio.on("task_end", self._ended)

    def _message(self, message: dict) -> None:
        self.messages.append(message)

    def _ended(self, *_) -> None:
        if sum(1 for m in self.messages if m.get("output")) >= self.said:
            self.idle.set()

    async def __aenter__(self) -> Session:
        auth = {"sessionId": self.id, "clientType": "webapp", "chatProfile": self.profile, "userEnv": "{}", "threadId": None}
        await self.sio.connect(self.url, socketio_path="/ws/socket.io", transports=["websocket"],
                               headers={"Cookie": self.cookie}, auth=auth)  # fmt: skip
        self.idle.clear()
        await self.sio.emit("connection_successful")
        await asyncio.wait_for(self.idle.wait(), 30)  # on_chat_start finished
        return self

    async def __aexit__(self, *exc) -> None:
        await self.sio.disconnect()

    async def upload(self, http: httpx.AsyncClient, name: str, data: bytes, mime: str) -> dict:
        r = await http.post("/project/file", params={"session_id": self.id}, files={"file": (name, data, mime)})
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {"text": r.text}
        return {"status": r.status_code, **body}

    async def send(self, file_ids: list[str], said: int, text: str = "") -> list[dict]:
        """A message with the files, as the browser sends it; the app's messages until it has said `said` worded ones
        and ended its task (process_message's task_end comes after on_message returned: the files are settled)."""
        self.messages.clear()
        self.idle.clear()
        self.said = said
        step = {"id": str(uuid.uuid4()), "threadId": "", "name": "user", "type": "user_message", "output": text,
                "createdAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "metadata": {}}  # fmt: skip
        await self.sio.emit("client_message", {"message": step, "fileReferences": [{"id": i} for i in file_ids]})
        try:
            await asyncio.wait_for(self.idle.wait(), 60)
        except TimeoutError:
            raise SystemExit(f"the app did not finish with the message in 60 s; it sent: {self.messages}") from None
        return [{"content": m.get("output", ""), "error": m.get("isError", False)} for m in self.messages if m.get("output")]


async def main(url: str, user: str, password: str) -> dict:
    out: dict = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        login = await http.post("/login", data={"username": user, "password": password})
        login.raise_for_status()
        cookie = f"access_token={http.cookies['access_token']}"
        async with Session(url, cookie, ONBOARDING) as page:  # no paper clip on this page: the route is asked directly
            out["onboarding"] = await page.upload(http, *GOOD)
        async with Session(url, cookie, DOCS) as page:
            good, broken = await page.upload(http, *GOOD), await page.upload(http, *BROKEN)
            out["docs_uploads"] = [good, broken]
            if good["status"] != 200 or broken["status"] != 200:
                return out  # nothing to send: the test shows why
            out["docs_replies"] = await page.send([good["id"], broken["id"]], said=2)  # indexed; refused
            out["docs_session"] = page.id
            # the page shows both files under the message and fetches them: the refused one is gone from the session
            out["docs_fetch"] = [(await http.get(f"/project/file/{f['id']}", params={"session_id": page.id})).status_code
                                 for f in (good, broken)]  # fmt: skip
            # the quota (the test sets it just above a few KB): the first fills it, the next is refused with the sizes
            filler = ("notes.txt", "备忘。".encode() * 4000, "text/plain")
            out["quota"] = [await page.upload(http, *filler), await page.upload(http, *filler)]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4])), ensure_ascii=False))
