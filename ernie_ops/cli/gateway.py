"""`ernie-ops gateway limits`: what nginx in front of this host needs from its config (the ernie_nginx and ernie_edge
roles ask): the chat's upload limit, and the gateway's weight at an edge (the replicas of its pool)."""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.chat import upload_limits
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import print_json
from ernie_ops.errors import EXIT_OK


def register(sub: Subcommands) -> None:
    gw = sub.add_parser("gateway", help="what nginx in front of this host needs, from ernie.yaml (roles ernie_nginx, ernie_edge)")
    gwsub = subcommands(gw, "gateway_command")
    gl = gwsub.add_parser(
        "limits",
        help="as JSON: the body limit (MB) of the chat's upload location (chat.docs.max_file_mb), the weight at an edge (pool.replicas)",
    )
    gl.set_defaults(func=run_limits)


def run_limits(args: argparse.Namespace) -> int:
    cfg = config.load(args.config)
    chat = cfg.chat
    print_json(
        {"chat_upload_mb": upload_limits.nginx_mb(chat), "chat_app_upload_mb": chat.docs.max_file_mb, "edge_weight": cfg.pool.replicas}
    )
    return EXIT_OK
