"""`ernie-ops chat`: run the Chainlit chat app (ernie-chainlit.service's ExecStart; by hand for development).
`ernie-ops chat feedback [--since 7d] [--json]`: the thumbs up/down users gave, with question, answer and sources."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime

from ernie_ops import config
from ernie_ops.chat_app import server
from ernie_ops.cli.args import Parser, Subcommands, port
from ernie_ops.cli.console import out_console, plain, print_json
from ernie_ops.errors import EXIT_OK


def register(sub: Subcommands) -> None:
    ch = sub.add_parser("chat", help="run the Chainlit chat app (ernie-chainlit.service's ExecStart; by hand for development)")
    ch.add_argument("--host", help="listen address (default: chat.host)")
    ch.add_argument("--port", type=port, help="listen port (default: chat.port)")
    ch.add_argument("--state-dir", help="Chainlit's writable app root (default: $STATE_DIRECTORY, else ~/.local/state/ernie-ops-chat)")
    ch.set_defaults(func=run)
    chsub = ch.add_subparsers(dest="chat_command", parser_class=Parser, metavar="{feedback}")  # none: run the app
    fb = chsub.add_parser("feedback", help="the feedback users gave on replies, with the question, the answer and the sources shown")
    fb.add_argument("--since", default="7d", help="how far back: 7d, 24h, 30m, 2w (default: 7d)")
    fb.add_argument("--json", action="store_true", help="one JSON list on stdout")
    fb.set_defaults(func=run_feedback)


def run(args: argparse.Namespace) -> int:
    cfg = config.load(args.config)
    return server.run(cfg, config.resolve_path(args.config), server.state_dir(args.state_dir), host=args.host, port=args.port)


def run_feedback(args: argparse.Namespace) -> int:
    from ernie_ops.threads import database, feedback  # SQLAlchemy: imported by the command that needs it

    history = config.load(args.config).chat.history
    since = datetime.now(UTC) - feedback.parse_since(args.since)
    url = database.existing_url(history)
    rows = feedback.report(asyncio.run(_feedback_since(url, since))) if url else []
    if args.json:
        print_json(feedback.as_json(rows), indent=2, ensure_ascii=False)
        return EXIT_OK
    if not url:
        plain(f"no chat history yet ({history.sqlite_file} does not exist): no feedback", err=True)
        return EXIT_OK
    _print_table(rows, args.since)
    return EXIT_OK


async def _feedback_since(url: str, since: datetime):
    from ernie_ops.threads.store import ThreadStore

    store = await ThreadStore.open(url)
    try:
        return await store.feedback_since(since)
    finally:
        await store.close()


def _print_table(rows, since: str) -> None:
    from rich.table import Table
    from rich.text import Text

    from ernie_ops.threads.feedback import UP, shorten

    if not rows:
        plain(f"no feedback in the last {since}", err=True)
        return
    t = Table(title=f"chat feedback, last {since}", show_lines=True)
    for name in ("when (UTC)", "user", "", "comment", "question", "answer", "sources"):
        t.add_column(name, overflow="fold")
    for r in rows:
        cells = (r.when.strftime("%Y-%m-%d %H:%M"), r.user, r.rating, r.comment, shorten(r.question, 200), shorten(r.answer, 300))
        t.add_row(*(Text(c) for c in cells), Text("\n".join(r.sources)))  # user text: never read as markup
    out_console.print(t)
    down = sum(1 for r in rows if r.rating != UP)
    plain(f"{len(rows)} feedback(s): {len(rows) - down} up, {down} down", err=True)
