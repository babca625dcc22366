"""`ernie-ops serve PORT`: one vLLM instance under systemd (the unit's ExecStart)."""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, port


def register(sub: Subcommands) -> None:
    s = sub.add_parser("serve", help="run one vLLM instance under systemd (the unit's ExecStart)")
    s.add_argument("port", type=port)
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ernie_ops.serving import launcher  # lazy: +36 ms start-up (-X importtime); only serve needs it

    launcher.setup_logging()
    cfg = config.load(args.config)
    return launcher.serve(cfg, args.port)
