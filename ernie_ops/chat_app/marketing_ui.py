"""The marketing-copy scenario in the chat (营销文案): a form, posts as cards, batch files (Chainlit side).

Loaded by app.py only (it imports chainlit). The work is done elsewhere: `marketing.generate` writes and
checks the posts through the gateway, `marketing.batch` runs a product list, `chat.cards` turns a post into
the card's props. Here: which element shows what, and what each button does.

- The form is a custom element (elements/CopyForm.jsx) sent when the chat starts; its submit calls the
  `copy_generate` action with the raw values. Bad values come back into the form (every field at once,
  under its input); a gateway failure shows the chat's sentence in the form. Nothing is generated then.
  Its props carry its id (`form_id`): the page keeps what is typed per form, so a remount by Chainlit (the
  chat moving to the thread's address after its first interaction) does not empty a field being typed.
- The form's channel (朋友圈 default, 微博, 小红书: marketing/channels.py) is chosen in the form like the tone; it
  gives the length limit when the form leaves it empty, and its style and rules to the prompt and the checks.
- Each post is a CopyPost card; the app keeps (element, request, index) per card id in the session, so
  `copy_regenerate` rewrites that card only, from the request the app validated (the browser sends only
  the card id), and compares the new post with the other cards of the same request (near-duplicates).
  A card stores its request's values too (a prop the card does not show): a resumed thread's cards are
  rewritten like the session's own, their request validated again (`cards.stored_cards`). A card the app
  cannot rewrite (its request now refused, or stored before cards kept it) is refused with a sentence.
- A CSV/XLSX dropped into the Marketing chat runs as a batch: a BatchProgress element updated at most
  every PROGRESS_EVERY seconds, then the posts as CSV and XLSX downloads and the rows that were skipped.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import chainlit as cl

from ernie_ops.chat.cards import batch_report, form_props, post_props, stored_cards
from ernie_ops.client.gateway import ChatError, GatewayClient
from ernie_ops.errors import ErnieOpsError
from ernie_ops.marketing import batch_io, channels, read_isolated
from ernie_ops.marketing.batch import BatchProgress, BatchSummary, run_batch
from ernie_ops.marketing.config import MarketingConfig
from ernie_ops.marketing.generate import CopyRequest, CopyWriter, FormError

log = logging.getLogger("ernie_ops.chat")
PROGRESS_EVERY = 0.5  # seconds between two updates of the progress element
INTRO = (
    "填写下面的表单生成文案；也可以把 CSV/XLSX 商品清单（每行一个商品：产品、卖点、目标人群…）拖进对话框批量生成。 / "
    "Fill in the form; or drop a CSV/XLSX product list here for a batch."
)
USE_THE_FORM = "营销文案用上面的表单生成；批量请上传 CSV 或 XLSX 文件。 / Use the form above, or upload a CSV/XLSX file for a batch."
STALE_CARD = "这张卡片属于之前的对话，请重新生成。 / This card belongs to an earlier chat; generate again."
FORM, CARDS = "copy_form", "copy_cards"


async def send_in_order(content: str, elements: list) -> cl.Message:
    """A message, then its elements one by one: `Message.send` sends them concurrently (asyncio.gather) and
    the page shows them in arrival order, which put a long card after a short one (seen in the browser)."""
    msg = cl.Message(content=content)
    await msg.send()
    for element in elements:
        await element.send(for_id=msg.id)
    return msg


TITLE = "营销文案 / Marketing copy"  # a marketing thread's name until its first product names it


def thread_title(product: str) -> str:
    return f"{product} · 营销文案"


class CopyTool:
    """One per app process; per-chat state lives in `cl.user_session`."""

    def __init__(self, cfg: MarketingConfig, client: GatewayClient, system_prompt: str,
                 name_thread: Callable[[str], Awaitable[None]] | None = None, reads: asyncio.Semaphore | None = None):  # fmt: skip
        """`name_thread(name)`: names this chat's thread after its first product (with history; a name the user gave stays).
        `reads`: held while a product list is read in its child (the app's bound on reads at once, shared with Docs)."""
        self.cfg, self.client, self.system_prompt, self.name_thread = cfg, client, system_prompt, name_thread
        self.reads = reads or asyncio.Semaphore(1)
        self.writer = CopyWriter(client, cfg, system_prompt)

    async def start(self) -> list[cl.Message]:
        """The form, in a message; returns what it sent (app.py shows it again if Chainlit moves the session)."""
        form = cl.CustomElement(name="CopyForm", props=form_props(self.cfg), display="inline")
        form.props["form_id"] = form.id  # the page keeps what is typed in this form across a remount (CopyForm.jsx)
        cl.user_session.set(FORM, form)
        cl.user_session.set(CARDS, {})
        msg = cl.Message(content=INTRO, elements=[form])
        await msg.send()
        return [msg]

    def resume(self, stored: list[dict]) -> int:
        """A resumed thread's form (its stored element, the last one) is this session's again: it generates and
        shows its errors in place. Its cards are the session's again too (`cards.stored_cards`: one request per
        generation, validated again with the current config), each as its stored element, so 重写 updates the
        stored card in place. A card whose request the config now refuses, or one stored before cards kept
        their request (no `request` prop), is not rewritten: 重写 on it says STALE_CARD.
        Returns the forms found (0 or 1)."""
        forms = [e for e in stored if e.get("name") == "CopyForm" and e.get("id")]
        if forms:
            e = forms[-1]
            form = cl.CustomElement(id=e["id"], name="CopyForm", props=e.get("props") or form_props(self.cfg),
                                    display=e.get("display") or "inline", for_id=e.get("forId"), thread_id=e.get("threadId"))  # fmt: skip
            form.props["form_id"] = form.id
            cl.user_session.set(FORM, form)
        cards = {}
        for card, (e, request, index) in stored_cards(stored, self.cfg).items():
            element = cl.CustomElement(id=e["id"], name="CopyPost", props=e["props"], display=e.get("display") or "inline",
                                       for_id=e.get("forId"), thread_id=e.get("threadId"))  # fmt: skip
            cards[card] = (element, request, index)
        cl.user_session.set(CARDS, cards)
        return len(forms[-1:])

    async def _show_form(self, values: dict, errors: dict | None = None, failure: str | None = None) -> None:
        form: cl.CustomElement | None = cl.user_session.get(FORM)
        if form is not None:
            form.props = form_props(self.cfg, values, errors, failure) | {"form_id": form.id}
            await form.update()

    async def generate(self, payload: dict) -> None:
        values = payload.get("values") if isinstance(payload.get("values"), dict) else {}
        try:
            request = CopyRequest.from_form(values, self.cfg)
        except FormError as exc:
            await self._show_form(values, errors=exc.problems)
            return
        await self._show_form(values)
        if self.name_thread is not None:
            await self.name_thread(thread_title(request.product))
        started = time.perf_counter()
        try:
            posts = await self.writer.posts(request)
        except ChatError as exc:
            log.warning("copy: generation failed: %s", exc)
            await self._show_form(values, failure=exc.user_text)
            return
        cards: dict = cl.user_session.get(CARDS) or {}
        elements = []
        for index, post in enumerate(posts, start=1):  # 1-based, as CopyWriter.post counts (each index its own angle)
            card = uuid.uuid4().hex
            element = cl.CustomElement(name="CopyPost", props=post_props(post, card, index, request.max_chars, request), display="inline")
            cards[card] = (element, request, index)
            elements.append(element)
        cl.user_session.set(CARDS, cards)
        ok = sum(1 for p in posts if p.ok)
        log.info(
            "copy: %d post(s) for %r, %d within the rules, %d attempt(s), %.1fs",
            len(posts), request.product, ok, sum(p.attempts for p in posts), time.perf_counter() - started,
        )  # fmt: skip
        label = channels.CHANNELS[request.channel].label.split(" ", 1)[0] if request.channel else ""
        content = (
            f"**{request.product}**（{label}）：{len(posts)} 条文案，{ok} 条符合规则"
            f"（≤{request.max_chars} 字、渠道规则、无绝对化用语、互不雷同）。"
        )
        if ok < len(posts):
            content += " 标红的卡片重写了几次仍未通过，请修改后再用或点「重写」。 / Flagged cards failed the rules after the retries."
        await send_in_order(content, elements)

    async def regenerate(self, payload: dict) -> None:
        cards: dict = cl.user_session.get(CARDS) or {}
        found = cards.get(str(payload.get("card")))
        if found is None:
            await cl.ErrorMessage(content=STALE_CARD).send()
            return
        element, request, index = found
        siblings = {i: e.props["text"] for e, r, i in cards.values() if r is request and i != index}
        others = [siblings.get(i) for i in range(1, request.posts + 1)]  # by index: a duplicate names its card's number
        try:
            post = await self.writer.post(request, index, others)
        except ChatError as exc:
            log.warning("copy: regeneration failed: %s", exc)
            await cl.ErrorMessage(content=exc.user_text).send()
            return
        element.props = post_props(post, element.props["card"], index, request.max_chars, request)
        await element.update()
        log.info("copy: card %d of %r regenerated (%d attempt(s), ok=%s)", index, request.product, post.attempts, post.ok)

    async def batch(self, files: list) -> list:
        """Each uploaded product list in turn: progress, then the posts as downloads. Returns the lists that were
        read (the app keeps those with the thread; a refused one is dropped)."""
        read = []
        for f in files:
            with tempfile.TemporaryDirectory(prefix="ernie-copy-") as tmp:
                if await self._one_batch(f, Path(tmp)):
                    read.append(f)
        return read

    async def _one_batch(self, upload, tmp: Path) -> bool:
        name = Path(upload.name or "products").name
        source = tmp / name  # under its own name: the sentences about it name the user's file, not an upload id
        try:
            source.write_bytes(await asyncio.to_thread(Path(upload.path).read_bytes))
            async with self.reads:
                read = await read_isolated.read_products(  # in a child, stops reading at the row limit
                    source, self.cfg.max_batch_rows, timeout=self.cfg.read_timeout_seconds, memory_mb=self.cfg.read_memory_mb
                )
        except batch_io.TooManyRows:
            await cl.ErrorMessage(
                content=f"{name} 超过 {self.cfg.max_batch_rows} 行上限（chat.marketing.max_batch_rows），请拆分。 / "
                f"{name} has more than {self.cfg.max_batch_rows} rows, the limit: split it."
            ).send()
            return False
        except (OSError, ErnieOpsError) as exc:
            await cl.ErrorMessage(content=f"{name}: {exc}" if isinstance(exc, OSError) else str(exc)).send()
            return False
        if not read.rows:
            await cl.ErrorMessage(content=batch_report(name, read, BatchSummary(output=""))).send()
            return False
        progress = cl.CustomElement(
            name="BatchProgress", props={"file": name, "done": 0, "total": len(read.rows), "failed": 0}, display="inline"
        )
        await cl.Message(content=f"批量生成 / Batch: {name}", elements=[progress]).send()
        latest: dict = {}

        def on_progress(p: BatchProgress) -> None:
            latest.update(done=p.done, total=p.total, failed=p.failed, current=p.current)

        async def publish() -> None:
            shown = None
            while True:
                await asyncio.sleep(PROGRESS_EVERY)
                if latest and latest != shown:
                    shown = dict(latest)
                    progress.props = {"file": name, **shown}
                    await progress.update()

        out_csv = tmp / f"{Path(name).stem}-posts.csv"
        ticker = asyncio.create_task(publish())
        try:
            writer = CopyWriter(self.client, self.cfg, self.system_prompt)  # its own counters: the summary is this batch's
            summary = await run_batch(read, out_csv, writer, self.cfg, concurrency=self.cfg.batch_concurrency, progress=on_progress)
        except ErnieOpsError as exc:
            log.error("copy batch %s: %s", name, exc)
            await cl.ErrorMessage(content=str(exc)).send()
            return True  # the list was read; the model failed
        finally:
            ticker.cancel()
        progress.props = {"file": name, **latest, "current": "", "finished": True}
        await progress.update()
        files = []
        if out_csv.exists():
            out_xlsx = out_csv.with_suffix(".xlsx")
            posts, _ = await asyncio.to_thread(batch_io.read_posts, out_csv)
            await asyncio.to_thread(batch_io.write_posts, out_xlsx, posts)
            files = [cl.File(name=p.name, path=str(p), display="inline") for p in (out_csv, out_xlsx)]
        log.info("copy batch %s: %s", name, summary)
        await cl.Message(content=batch_report(name, read, summary), elements=files).send()
        return True
