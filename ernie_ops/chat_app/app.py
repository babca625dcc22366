"""The Chainlit hooks (loaded by `ernie-ops chat` through Chainlit's runner, never imported elsewhere).

Login: Chainlit password auth against the users file (scrypt hashes), chosen over header auth from
nginx because it needs nothing but the app and the file, and it works the same by hand. Chat
profiles are the scenarios; a session's `Conversation` lives in `cl.user_session`.

History (`chat.history.enabled`): Chainlit's data layer is `HistoryLayer` over the thread store, so the
sidebar lists the user's threads, a thread opens and continues (`on_chat_resume` restores its profile and
the Conversation's history), replies get thumbs with a comment, and uploads stay with their thread until
it is deleted. With several chat hosts (one shared database, an index per host) a resumed Docs thread's uploads
are indexed on this host from their stored copies if it lacks them, and a daily sweep drops the uploads of
threads deleted elsewhere (`upload_restore`). Without history a chat lives in memory only and its uploads go
when it ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import chainlit as cl
from chainlit.config import ChainlitConfigOverrides, FeaturesSettings, SpontaneousFileUploadFeature
from chainlit.types import DeleteFeedbackRequest, UpdateFeedbackRequest  # at module level: FastAPI resolves the route annotations here
from fastapi import UploadFile  # at module level too (the upload route's annotation)
from fastapi.responses import JSONResponse

from ernie_ops import config
from ernie_ops.chat import thread_dicts, upload_gate, upload_limits, users
from ernie_ops.chat.conversation import Conversation, Source
from ernie_ops.chat.docs_session import NO_DOCUMENTS, DocsSession, Upload, forget_all_uploads, upload_summary
from ernie_ops.chat.drain import INTERRUPTED, REPLIES, RESTARTING
from ernie_ops.chat.upload_restore import keep_sweeping, restore_uploads
from ernie_ops.chat_app import marketing_ui, session_moves
from ernie_ops.chat_app.marketing_ui import USE_THE_FORM
from ernie_ops.chat_app.revocation import RevokedSessions
from ernie_ops.chat_app.services import ChatServices
from ernie_ops.errors import ConfigError, ErnieOpsError
from ernie_ops.threads.database import database_url
from ernie_ops.threads.errors import HistoryUnavailable

log = logging.getLogger("ernie_ops.chat")


async def _name_thread(name: str) -> None:
    """This chat's thread gets a specific name (a marketing thread: its first product), with history only."""
    if APP.history.enabled:
        from chainlit.data import get_data_layer

        await get_data_layer().name_thread(cl.context.session.thread_id, name)


APP = ChatServices.from_config(config.load(), os.environ, name_thread=_name_thread)
log.info("chat app: gateway %s, model %s, scenarios: %s", APP.client.base_url, APP.cfg.model.served_name, ", ".join(APP.scenarios))


def _forget_previous_uploads() -> None:
    """Without history a chat's uploads last as long as the chat: those of the previous run go at start."""
    try:
        if not APP.history.enabled and (dropped := forget_all_uploads(APP.docs)):
            log.info("docs: %d upload(s) of chats of the previous run removed", dropped)
    except ErnieOpsError as exc:  # the app still serves its other scenarios; Docs says what is wrong
        log.error("docs: the index %s cannot be used: %s", APP.docs.index_file, exc)


_forget_previous_uploads()

# A thread begun with a button is named after the action by Chainlit: a readable title instead.
ACTION_TITLES = {"copy_generate": marketing_ui.TITLE, "copy_regenerate": marketing_ui.TITLE, "onboarding_confirm": "入职 / Onboarding"}
PROFILE_KEY = "chat_profile"  # in the thread's metadata: the scenario a resumed thread continues in (Chainlit's own key)
UPLOADS_OFF = ChainlitConfigOverrides(features=FeaturesSettings(spontaneous_file_upload=SpontaneousFileUploadFeature(enabled=False)))


@cl.password_auth_callback
async def login(username: str, password: str) -> cl.User | None:
    """The name is logged with repr(): a name holding a newline cannot forge a log line."""
    if wait := APP.logins.locked_for(username):
        log.warning("login %r refused: locked for %.0f s more after repeated wrong passwords", username, wait)
        return None
    try:
        async with APP.hashing:
            ok = await asyncio.to_thread(users.authenticate, APP.chat.users_file, username, password, APP.upgrades)
    except ConfigError as exc:
        log.error("login %r refused: the users file is not usable: %s", username, exc)
        return None
    if ok:
        APP.logins.succeeded(username)
    elif lock := APP.logins.failed(username):
        log.warning("login %r refused: too many wrong passwords in a row, locked for %.0f s", username, lock)
    log.info("login %r: %s", username, "ok" if ok else "refused")
    if not ok:
        return None
    # the hash this login was checked against: a removed user or a new password ends the session (revocation.py)
    credential = users.credentials(APP.chat.users_file).get(username)
    return cl.User(identifier=username, metadata={"provider": "users-file", "credential": credential})


def _end_revoked_sessions() -> None:
    """Every request and websocket with a login is checked against the users file as it is now (revocation.py)."""
    from chainlit.server import app as server

    server.add_middleware(RevokedSessions, users_file=APP.chat.users_file, root_path=APP.chat.root_path)


_end_revoked_sessions()
session_moves.install()  # a session moved to a new socket before it began starts (or resumes) there


@cl.set_chat_profiles
async def profiles(user: cl.User | None = None, language: str | None = None) -> list[cl.ChatProfile]:
    return [
        cl.ChatProfile(
            name=s.name,
            markdown_description=s.description or s.name,
            default=s.name == APP.default,
            starters=[cl.Starter(label=text[:40], message=text) for text in s.starters] or None,
            config_overrides=None if s.takes_files else UPLOADS_OFF,  # the paper clip only where files are read
        )
        for s in APP.scenarios.values()
    ]


def _serve_stored_elements() -> None:
    """GET <root>/history/element/{thread}/{element}: a stored element's bytes (a resumed thread's sources and
    uploads), to the thread's author only, by Chainlit's own check (chainlit.data.acl.is_thread_author: an
    unknown thread is 404, another user's 401). Put before Chainlit's catch-all route, which serves the page.
    Also PUT and DELETE /feedback, checked (checked_feedback, checked_feedback_removal), before Chainlit's unchecked ones."""
    from chainlit.auth import get_current_user
    from chainlit.data import get_data_layer
    from chainlit.data.acl import is_thread_author
    from chainlit.server import app as server
    from fastapi import Depends, HTTPException, Response

    async def stored_element(thread_id: str, element_id: str, current_user=Depends(get_current_user)) -> Response:  # noqa: B008
        if not current_user:
            raise HTTPException(status_code=401, detail="Unauthorized")
        await is_thread_author(current_user.identifier, thread_id)
        layer = get_data_layer()
        element = await layer.get_element(thread_id, element_id)
        content = await layer.element_content(thread_id, element_id) if element else None
        if content is None:
            raise HTTPException(status_code=404, detail="Element not found")
        mime, disposition = thread_dicts.served_as(element.get("mime"))
        headers = {"Cache-Control": "private, no-store", "X-Content-Type-Options": "nosniff", "Content-Disposition": disposition}
        return Response(content, media_type=mime, headers=headers)

    server.add_api_route(f"{APP.chat.root_path}{thread_dicts.ELEMENT_ROUTE}/{{thread_id}}/{{element_id}}", stored_element, methods=["GET"])
    server.router.routes.insert(0, server.router.routes.pop())

    async def checked_feedback(update: UpdateFeedbackRequest, current_user=Depends(get_current_user)) -> JSONResponse:  # noqa: B008
        """Chainlit's PUT /feedback stores a rating for any message id it is given; this one first checks that
        the message is in a thread of the logged-in user and that a feedback id it names (to change a rating) is
        that user's too (401 otherwise), then stores it the same way."""
        feedback = update.feedback
        layer = get_data_layer()
        if (
            not current_user
            or not feedback.threadId
            or await layer.step_author(feedback.threadId, feedback.forId) != current_user.identifier
            or (feedback.id and await layer.feedback_author(feedback.id) not in (None, current_user.identifier))
        ):
            raise HTTPException(status_code=401, detail="Unauthorized")
        return JSONResponse(content={"success": True, "feedbackId": await layer.upsert_feedback(feedback)})

    async def checked_feedback_removal(payload: DeleteFeedbackRequest, current_user=Depends(get_current_user)) -> JSONResponse:  # noqa: B008
        """Chainlit's DELETE /feedback removes any rating whose id it is given; this one only the logged-in user's."""
        layer = get_data_layer()
        if not current_user or await layer.feedback_author(payload.feedbackId) != current_user.identifier:
            raise HTTPException(status_code=401, detail="Unauthorized")
        await layer.delete_feedback(payload.feedbackId)
        return JSONResponse(content={"success": True})

    server.add_api_route(f"{APP.chat.root_path}/feedback", checked_feedback, methods=["PUT"])
    server.router.routes.insert(0, server.router.routes.pop())
    server.add_api_route(f"{APP.chat.root_path}/feedback", checked_feedback_removal, methods=["DELETE"])
    server.router.routes.insert(0, server.router.routes.pop())


def _check_uploads() -> None:
    """POST <root>/project/file, before Chainlit's: a scenario that reads no files takes none (Chainlit checks only its
    global switch, so a hidden paper clip still took files), and a user's files stay within chat.upload_quota_mb
    (upload_gate). Then Chainlit's own route stores the file in the session's directory, as before."""
    from chainlit.auth import get_current_user
    from chainlit.server import app as server
    from chainlit.server import upload_file
    from chainlit.session import WebsocketSession
    from fastapi import Depends, HTTPException

    async def checked_upload(session_id: str, file: UploadFile, ask_parent_id: str | None = None, current_user=Depends(get_current_user)):  # noqa: B008
        session = WebsocketSession.get_by_id(session_id)
        if session is None or not current_user or not session.user or session.user.identifier != current_user.identifier:
            return await upload_file(current_user, session_id, file, ask_parent_id)  # Chainlit's own 404 and 401
        user, size = current_user.identifier, file.size or 0
        scenario = APP.scenario(session.chat_profile)
        held = APP.uploads.bytes_of(user) + await _stored_file_bytes(user)
        why = upload_gate.refusal(scenario, asked=ask_parent_id is not None, size=size, held=held, quota_mb=APP.chat.upload_quota_mb)
        if why:
            log.warning("upload by %r refused (%s, %d bytes, %d held): %s", user, scenario.name, size, held, why.sentence)
            raise HTTPException(status_code=why.status, detail=why.sentence)
        response = await upload_file(current_user, session_id, file, ask_parent_id)
        APP.uploads.add(session_id, user, json.loads(response.body)["id"], size)
        return response

    server.add_api_route(f"{APP.chat.root_path}/project/file", checked_upload, methods=["POST"])
    server.router.routes.insert(0, server.router.routes.pop())


async def _stored_file_bytes(user: str) -> int:
    """The bytes of the user's files in the history (0 without history; a database that cannot answer counts 0:
    the pending files and the per-file limit still bound what one user takes)."""
    if not APP.history.enabled:
        return 0
    from chainlit.data import get_data_layer

    try:
        return await (await get_data_layer().store()).file_bytes_of(user)
    except HistoryUnavailable as exc:
        log.warning("upload quota: the history cannot say what %r holds: %s", user, exc)
        return 0


_check_uploads()


async def _forget_thread_uploads(user: str, thread_id: str) -> None:
    """A deleted thread's uploads leave the document index too."""
    try:
        dropped = await DocsSession(APP.docs, user, thread_id).forget()
        if dropped:
            log.info("docs: thread of %s deleted: %d uploaded document(s) removed", user, dropped)
    except ErnieOpsError as exc:
        log.warning("docs: could not remove the uploads of a deleted thread: %s", exc)


async def _forget_uploads_of(owner: str | None, thread_id: str) -> None:
    """Retention deleted a thread: its uploads leave the document index too (an ownerless thread has none)."""
    if owner is not None:
        await _forget_thread_uploads(owner, thread_id)


def _register_history() -> None:
    """With chat.history.enabled, everything the history needs, in one place: the database created or migrated before
    the app serves (Chainlit imports this module before its event loop runs: a schema newer than this ernie-ops stops
    the app with its sentence; a database that cannot be reached does not, the chat answers without history and the
    layer tries again at each call), Chainlit's data layer over the thread store, the stored elements' and checked
    feedback routes, and in the background retention and the sweep of uploads whose thread is gone."""
    from chainlit.data import get_data_layer

    from ernie_ops.chat_app.data_layer import HistoryLayer
    from ernie_ops.threads.breaker import Breaker
    from ernie_ops.threads.retention import RETENTION_INTERVAL_SECONDS, keep_applying
    from ernie_ops.threads.store import ThreadStore

    url, breaker = database_url(APP.history), Breaker()  # one breaker per database: an open that failed is not retried per message

    async def open_history() -> ThreadStore:
        return await ThreadStore.open(url, breaker=breaker)

    async def migrate_at_start() -> None:
        try:
            store = await open_history()
        except HistoryUnavailable as exc:
            log.error("history: the database cannot be reached at start; the chat runs without saving history until it can: %s", exc)
            return
        await store.close()

    asyncio.run(migrate_at_start())

    @cl.data_layer
    def data_layer() -> HistoryLayer:
        return HistoryLayer(open_history, APP.chat.root_path, on_deleted=_forget_thread_uploads, action_titles=ACTION_TITLES)

    _serve_stored_elements()

    async def threads():
        return await get_data_layer().store()

    @cl.on_app_startup
    async def start_retention() -> None:
        """In the background (never delays the start), at start, then daily: chat.history.retention_days, and the
        sweep of this host's uploads whose thread is gone from the shared database (deleted on another host)."""
        days = APP.history.retention_days
        if days is not None:
            APP.background.append(asyncio.create_task(keep_applying(get_data_layer().store, days, _forget_uploads_of)))
        APP.background.append(asyncio.create_task(keep_sweeping(threads, APP.docs, RETENTION_INTERVAL_SECONDS)))

    @cl.on_app_shutdown
    async def stop_retention() -> None:
        for task in APP.background:
            task.cancel()


if APP.history.enabled:
    _register_history()


def _new_conversation(name: str | None) -> Conversation:
    user = cl.user_session.get("user")
    scenario = APP.scenario(name)
    who = user.identifier if user else "-"
    docs = DocsSession(APP.docs, who, cl.context.session.thread_id, embed=APP.embed) if scenario.retrieval else None
    conv = Conversation(scenario, APP.chat, APP.budget, APP.client, APP.counter, user=who, docs=docs, session=cl.context.session.thread_id)
    cl.user_session.set("conversation", conv)
    return conv


@cl.on_chat_start
async def start() -> None:
    """A new chat's start. Run again when the session moved to a new socket before its first interaction
    (session_moves.py): what the earlier run showed is removed first, so a page that kept it shows it once."""
    again = cl.user_session.get("conversation") is not None
    for msg in cl.user_session.get("shown") or []:
        await msg.remove()
    conv = _new_conversation(cl.user_session.get("chat_profile"))
    if again:
        log.info("chat of %s (%s) moved to another socket before its first message: its start shown again",
                 conv.user, conv.scenario.name.replace(" ", "_"))  # fmt: skip
    cl.user_session.set("shown", await _show_start(conv))


async def _show_start(conv: Conversation) -> list[cl.Message]:
    """What a chat shows before the user writes: Docs' collections, the Marketing form, the onboarding cards."""
    if conv.docs is not None:
        await _offer_collections(conv.docs)
    if conv.scenario.tool == "copy":
        return await APP.tools[conv.scenario.name].start()
    if conv.scenario.tool == "onboarding":
        return await APP.tools[conv.scenario.name].start(conv.user)
    return []


async def _tool():
    """The current chat's tool (None when its scenario has none, or the chat has not started). An action can be a
    thread's first interaction (the marketing form's 生成): the thread's scenario is remembered here too."""
    conv: Conversation | None = cl.user_session.get("conversation")
    if conv is None:
        return None
    await _remember_profile(conv)
    return APP.tools.get(conv.scenario.name)


def _login() -> str:
    user = cl.user_session.get("user")
    return user.identifier if user else "-"


@cl.action_callback("copy_generate")
async def copy_generate(action: cl.Action) -> None:
    tool = await _tool()
    if tool is not None and hasattr(tool, "generate"):
        await tool.generate(action.payload or {})


@cl.action_callback("copy_regenerate")
async def copy_regenerate(action: cl.Action) -> None:
    tool = await _tool()
    if tool is not None and hasattr(tool, "regenerate"):
        await tool.regenerate(action.payload or {})


@cl.action_callback("onboarding_confirm")
async def onboarding_confirm(action: cl.Action) -> None:
    tool = await _tool()
    if tool is not None and hasattr(tool, "confirm"):
        await tool.confirm(_login(), action.payload or {})


async def _offer_collections(docs: DocsSession) -> None:
    """The chat settings' collection choice: what this user may read, all picked by default."""
    try:
        allowed = await docs.collections()
    except ErnieOpsError as exc:
        log.error("docs: the index cannot be opened: %s", exc)
        await cl.ErrorMessage(content=f"文档索引暂时不可用 / The document index is not available: {exc}").send()
        return
    if allowed:
        items = {name: name for name in allowed}
        await cl.ChatSettings(
            [cl.input_widget.MultiSelect(id="collections", label="检索的文档集 / Collections to search", items=items, initial=allowed)]
        ).send()


@cl.on_settings_update
async def settings(values: dict) -> None:
    conv: Conversation | None = cl.user_session.get("conversation")
    if conv is not None and conv.docs is not None and isinstance(values.get("collections"), list):
        conv.docs.pick([str(v) for v in values["collections"]])  # narrowed to what the user may read at each search


@cl.on_chat_resume
async def resume(thread: dict) -> None:
    """A thread opened from the sidebar: its scenario (Chainlit has set the session's profile from the thread's
    metadata) and the model's view of its messages; a Docs thread searches its own uploads again (they are
    kept, keyed by user and thread); an onboarding thread's item cards confirm again; a marketing thread's form
    generates again and its cards are rewritten again (those whose request they carry and the config still takes);
    a scenario collecting fields (Support) has the fields it had collected (the flow replays the user's messages)."""
    conv = _new_conversation((thread.get("metadata") or {}).get(PROFILE_KEY) or cl.user_session.get("chat_profile"))
    conv.restore(thread_dicts.conversation_messages(thread.get("steps") or []))
    conv.sources_shown = thread_dicts.sources_shown(thread.get("elements") or [])
    log.info("resume user=%s thread=%s scenario=%s messages=%d", conv.user, thread.get("id"), conv.scenario.name.replace(" ", "_"),
             len(conv.history))  # fmt: skip
    if conv.docs is not None:
        await _restore_uploads(conv, thread)
        await _offer_collections(conv.docs)
    tool = APP.tools.get(conv.scenario.name)
    if tool is not None and hasattr(tool, "resume"):
        tool.resume(thread.get("elements") or [])


async def _restore_uploads(conv: Conversation, thread: dict) -> None:
    """A Docs thread resumed on a host whose index lacks its uploads (it was uploaded on another host): they are
    indexed again from the history database's copies. A failure is logged; the thread opens all the same."""
    if not APP.history.enabled:
        return
    from chainlit.data import get_data_layer

    layer = get_data_layer()
    try:
        await restore_uploads(APP.docs, thread, conv.user, layer.element_content, embed=APP.embed)
    except ErnieOpsError as exc:
        log.error("docs: the uploads of thread %s were not re-indexed: %s", thread.get("id"), exc)


async def _remember_profile(conv: Conversation) -> None:
    """The thread's scenario in its metadata at its first message (Chainlit writes it only when the socket
    closes, which an app restart may never do)."""
    if not APP.history.enabled or cl.user_session.get("profile_saved"):
        return
    cl.user_session.set("profile_saved", True)
    from chainlit.data import get_data_layer

    if (layer := get_data_layer()) is not None:
        await layer.update_thread(cl.context.session.thread_id, user_id=conv.user, metadata={PROFILE_KEY: conv.scenario.name})


@cl.on_chat_end
async def ended() -> None:
    session = cl.context.session
    APP.uploads.end(session.id)
    if APP.history.enabled:
        from chainlit.data import get_data_layer

        get_data_layer().forget_uploads(list(session.files))
    conv: Conversation | None = cl.user_session.get("conversation")
    if conv is not None and conv.docs is not None and not APP.history.enabled:  # with history, uploads stay with their thread
        try:
            dropped = await conv.docs.forget()
            if dropped:
                log.info("docs: chat of %s ended: %d uploaded document(s) removed", conv.user, dropped)
        except ErnieOpsError as exc:
            log.warning("docs: could not remove the uploads of an ended chat: %s", exc)


class MessageSink:
    """Tokens into one `cl.Message`; the cleaned text replaces them at the end."""

    def __init__(self) -> None:
        self.msg: cl.Message | None = None

    async def token(self, piece: str) -> None:
        if self.msg is None:
            self.msg = cl.Message(content="")
        await self.msg.stream_token(piece)

    async def finish(self, text: str, sources: list[Source]) -> None:
        msg = self.msg or cl.Message(content="")
        msg.content = text
        # A `side` element opens in the side panel when its name (【1】) is clicked in the text.
        msg.elements = [
            cl.Text(name=s.name, content=f"**{s.title}**\n\n{s.text}" if s.title else s.text, display=s.display) for s in sources
        ]
        await msg.send()

    async def say(self, text: str) -> None:
        await cl.Message(content=text).send()

    async def fail(self, text: str) -> None:
        await cl.ErrorMessage(content=text).send()

    async def stopped(self) -> None:
        if self.msg is not None:
            if REPLIES.cut:  # cut by a stop of the app, not by the user: say so in the stored answer
                self.msg.content += INTERRUPTED
            await self.msg.update()  # ends the streaming state; the partial text stays


@cl.on_message
async def on_message(message: cl.Message) -> None:
    if REPLIES.draining:  # the app is stopping: answers in flight finish, new ones would be cut (chat/drain.py)
        await cl.Message(content=RESTARTING).send()
        return
    async with REPLIES.reply():
        await _answer(message)


async def _answer(message: cl.Message) -> None:
    conv: Conversation | None = cl.user_session.get("conversation")
    if conv is None:  # a message before on_chat_start finished (reconnects): start now
        await start()
        conv = cl.user_session.get("conversation")
    await _remember_profile(conv)
    files = [e for e in message.elements or [] if isinstance(e, cl.File) or getattr(e, "path", None)]
    if conv.scenario.tool == "copy":
        if files:
            await _settle(files, await APP.tools[conv.scenario.name].batch(files))
        elif message.content.strip():
            await cl.Message(content=USE_THE_FORM).send()
        return
    if files and conv.docs is None:
        await _settle(files, [])
        await cl.Message(content="这个场景不读取文件；请切换到「文档问答 Docs」。 / This scenario does not read files: use Docs.").send()
        return
    if conv.scenario.tool == "onboarding":  # with the employee's facts and plan in the prompt, never bare free chat
        if message.content.strip():
            await APP.tools[conv.scenario.name].ask(_login(), message.content, conv, MessageSink())
        return
    if conv.docs is not None:
        if files:
            outcomes = await _index_uploads(conv.docs, [Upload(getattr(f, "path", None), f.name, getattr(f, "size", None)) for f in files])
            await _settle(files, _indexed(files, outcomes))
        if not message.content.strip():
            return
        if not files and not await conv.docs.has_documents():
            asked = await cl.AskFileMessage(
                content=NO_DOCUMENTS, accept=["*/*"], max_files=min(APP.docs.max_files_per_message, 10),
                max_size_mb=upload_limits.ask_mb(APP.chat), timeout=600, raise_on_timeout=False,
            ).send()  # fmt: skip
            if not asked:
                return
            outcomes = await _index_uploads(conv.docs, [Upload(f.path, f.name, f.size) for f in asked])
            kept = _indexed(asked, outcomes)
            await _keep_with_message(message, kept)
            await _settle(asked, kept, stored=False)
    await conv.on_user_message(message.content, MessageSink())


async def _keep_with_message(message: cl.Message, asked: list) -> None:
    """Files given when the app asked for them (AskFileMessage) become the user's message's attachments, as files
    sent with it are: with history the thread keeps their bytes (a resume on another host indexes them again; the
    thread's deletion deletes them), and a resumed thread shows them under the question."""
    if not APP.history.enabled:
        return
    for f in asked:
        try:
            await cl.File(name=f.name, path=f.path, mime=f.type or None, display="inline").send(for_id=message.id)
        except Exception as exc:  # the answer goes on; only the copy in the history is missing
            log.warning("docs: %s not kept with its thread: %s", f.name, exc)


def _indexed(files: list, outcomes: list) -> list:
    """The files the index took (one outcome per file; a single refusal of the whole message takes none)."""
    if len(outcomes) != len(files):
        return []
    return [f for f, o in zip(files, outcomes, strict=True) if o.action != "failed"]


async def _settle(files: list, kept: list, stored: bool = True) -> None:
    """The app's word on the files a message brought: the kept ones are stored with the thread (with history), the
    others leave the session's directory now and never reach the database; none is pending for the quota any more.
    `stored=False`: asked-for files, whose kept copies `_keep_with_message` already sent as new elements."""
    kept_ids = {f.id for f in kept}
    dropped = [f for f in files if f.id not in kept_ids]
    session = cl.context.session
    for f in dropped:
        session.files.pop(f.id, None)  # the page still shows the file: its link now answers 404, not a 500 with a traceback
        if getattr(f, "path", None):
            Path(f.path).unlink(missing_ok=True)
    APP.uploads.settle(session.id, [f.id for f in files])
    if APP.history.enabled and stored:
        from chainlit.data import get_data_layer

        await get_data_layer().settle_uploads([f.id for f in kept], [f.id for f in dropped])


async def _index_uploads(docs: DocsSession, uploads: list[Upload]) -> list:
    """Index the files (at most chat.file_reads_at_once at a time across all users), say what was indexed and why
    each refused file was; the outcomes, one per file."""
    async with cl.Step(name="索引文档 / Indexing", type="tool") as step:
        step.input = ", ".join(u.name for u in uploads)
        async with APP.reads:
            outcomes = await docs.upload(uploads)
        indexed, refused = upload_summary(outcomes)
        step.output = indexed or "-"
    if indexed:
        await cl.Message(content=indexed).send()
    for sentence in refused:
        await cl.ErrorMessage(content=sentence).send()
    return outcomes


@cl.on_stop
async def stopped() -> None:
    conv: Conversation | None = cl.user_session.get("conversation")
    log.info("stop pressed by %s", conv.user if conv else "-")
