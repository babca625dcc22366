"""`ernie-ops pool watch`: keep the pool's replicas that answer in rotation (the ernie-pool-watch service)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, bounded, subcommands
from ernie_ops.cli.console import out_console
from ernie_ops.errors import EXIT_OK


def register(sub: Subcommands) -> None:
    p = sub.add_parser("pool", help="the pool of replicas: keep those that answer in rotation")
    verbs = subcommands(p, "pool_command")
    w = verbs.add_parser("watch", help="probe each replica's /health every half second; take a hung or dead one out, put it back")
    w.add_argument("--rounds", type=bounded("--rounds", 1, 10**9), help="stop after this many rounds (default: run until stopped)")
    w.set_defaults(func=watch)


def watch(args: argparse.Namespace) -> int:
    from ernie_ops.traffic import (
        marks,
        pool_watch,  # lazy: httpx and the gateway only for this command
    )

    cfg = config.load(args.config)
    say = lambda line: out_console.print(escape(line), soft_wrap=True)  # noqa: E731
    pool_watch.run(cfg, say, rounds=args.rounds, changed=lambda: marks.write(cfg))
    return EXIT_OK
