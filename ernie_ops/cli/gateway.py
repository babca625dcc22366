"""`ernie-ops gateway limits`: what nginx in front of the chat app takes, from the config."""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.chat import upload_limits
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import print_json
from ernie_ops.errors import EXIT_OK


def register(sub: Subcommands) -> None:
    gw = sub.add_parser("gateway", help="what nginx in front of the chat app takes, from ernie.yaml (roles ernie_nginx, ernie_edge)")
    gwsub = subcommands(gw, "gateway_command")
    gl = gwsub.add_parser("limits", help="as JSON: the body limit (MB) of the chat's upload location, from chat.docs.max_file_mb")
    gl.set_defaults(func=run_limits)


def run_limits(args: argparse.Namespace) -> int:
    chat = config.load(args.config).chat
    print_json({"chat_upload_mb": upload_limits.nginx_mb(chat), "chat_app_upload_mb": chat.docs.max_file_mb})
    return EXIT_OK
