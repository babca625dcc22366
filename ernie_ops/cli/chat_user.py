"""`ernie-ops chat-user add|remove|list`: the chat's users file (scrypt-hashed passwords)."""

from __future__ import annotations

import argparse
import getpass
import sys

from ernie_ops import config
from ernie_ops.chat import users
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import err_console, out_console
from ernie_ops.errors import EXIT_OK, UsageError


def register(sub: Subcommands) -> None:
    cu = sub.add_parser("chat-user", help="manage the chat's users file (scrypt-hashed passwords)")
    cusub = subcommands(cu, "user_command")
    for name, helptext in (("add", "add a user or set a new password (read from stdin, or asked twice)"), ("remove", "remove a user")):
        cp = cusub.add_parser(name, help=helptext)
        cp.add_argument("name")
        cp.add_argument("--users-file", help="default: chat.users_file from the config")
        cp.set_defaults(func=run)
    cl = cusub.add_parser("list", help="the user names")
    cl.add_argument("--users-file", help="default: chat.users_file from the config")
    cl.set_defaults(func=run)


def _read_password() -> str:
    """One line from stdin when it is not a terminal (scripts, Ansible); else asked twice without echo."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise UsageError("the two passwords differ")
    return first


def run(args: argparse.Namespace) -> int:
    path = args.users_file or config.load(args.config).chat.users_file
    if args.user_command == "list":
        for name in sorted(users.load(path)):
            out_console.print(name)
        return EXIT_OK
    if args.user_command == "remove":
        users.remove(path, args.name)
        err_console.print(f"removed {args.name} from {path}")
        return EXIT_OK
    users.check_new(args.name, "x" * users.MIN_PASSWORD)  # a bad name fails before the password is asked
    created = users.add(path, args.name, _read_password())
    err_console.print(f"{'added' if created else 'new password for'} {args.name} in {path}")
    return EXIT_OK
