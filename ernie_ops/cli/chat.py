"""`ernie-ops chat`: run the Chainlit chat app (ernie-chainlit.service's ExecStart; by hand for development)."""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.chat import server
from ernie_ops.cli.args import Subcommands, port


def register(sub: Subcommands) -> None:
    ch = sub.add_parser("chat", help="run the Chainlit chat app (ernie-chainlit.service's ExecStart; by hand for development)")
    ch.add_argument("--host", help="listen address (default: chat.host)")
    ch.add_argument("--port", type=port, help="listen port (default: chat.port)")
    ch.add_argument("--state-dir", help="Chainlit's writable app root (default: $STATE_DIRECTORY, else ~/.local/state/ernie-ops-chat)")
    ch.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = config.load(args.config)
    return server.run(cfg, config.resolve_path(args.config), server.state_dir(args.state_dir), host=args.host, port=args.port)
