"""`ernie-ops logs`: the service's logs merged in time order (observe/logview reads them)."""

from __future__ import annotations

import argparse
import json
import time

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands
from ernie_ops.cli.console import err_console
from ernie_ops.errors import EXIT_OK, UsageError


def register(sub: Subcommands) -> None:
    lg = sub.add_parser("logs", help="the service's logs merged in time order: instances, chat app, gateway, cutover decisions")
    lg.add_argument("sources", nargs="*", metavar="SOURCE", help="an instance PORT, chat, gateway or ernie-ops (default: all)")
    lg.add_argument("-f", "--follow", action="store_true", help="then print new lines as they come (Ctrl-C ends)")
    lg.add_argument("-n", "--lines", type=int, default=100, help="the last N lines of the merged log (default 100)")
    lg.add_argument("--since", help="from a duration ago (10m, 2h) or a date-time ('2026-12-02 14:00')")
    lg.add_argument("--json", action="store_true", help="one JSON object per line (time, source, message; request for the gateway)")
    lg.add_argument("--phases", action="store_true", help="instances: only the launcher's phase lines, not vLLM's")
    lg.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ernie_ops.observe import logview  # lazy: +50 ms start-up (-X importtime); only logs needs it

    cfg = config.load(args.config)
    sel = logview.select(cfg, args.sources)
    if args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    since = logview.parse_since(args.since, time.time()) if args.since else None

    def emit(e: logview.Entry) -> None:
        print(json.dumps(e.as_dict(), ensure_ascii=False) if args.json else e.line(), flush=True)

    def warn(text: str) -> None:
        err_console.print(f"[yellow]warning:[/] {escape(text)}")

    for e in logview.read(cfg, sel, lines=args.lines, since=since, phases=args.phases, warn=warn):
        emit(e)
    if args.follow:
        logview.follow(cfg, sel, phases=args.phases, emit=emit)
    return EXIT_OK
