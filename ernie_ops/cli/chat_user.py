"""`ernie-ops chat-user add|remove|list`: the chat's users file (scrypt-hashed passwords). `remove` also offers
to delete the user's conversations from the chat history (asked on a terminal; `--delete-threads` /
`--keep-threads` for scripts; neither and no terminal: kept, and the command to delete them is printed). Deleting
them also drops the user's uploaded files from this host's docs index; other chat hosts drop theirs at their
daily sweep of uploads whose thread is gone."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys

from ernie_ops import config
from ernie_ops.chat import users
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import err_console, out_console, plain
from ernie_ops.errors import EXIT_OK, ErnieOpsError, UsageError


def register(sub: Subcommands) -> None:
    cu = sub.add_parser("chat-user", help="manage the chat's users file (scrypt-hashed passwords)")
    cusub = subcommands(cu, "user_command")
    for name, helptext in (("add", "add a user or set a new password (read from stdin, or asked twice)"), ("remove", "remove a user")):
        cp = cusub.add_parser(name, help=helptext)
        cp.add_argument("name")
        cp.add_argument("--users-file", help="default: chat.users_file from the config")
        if name == "remove":
            which = cp.add_mutually_exclusive_group()
            which.add_argument(
                "--delete-threads",
                action="store_true",
                default=None,
                help="delete their conversations too, and their uploads in this host's docs index "
                "(other chat hosts drop theirs at their daily sweep)",
            )
            which.add_argument("--keep-threads", dest="delete_threads", action="store_false", help="keep their conversations")
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


def _threads_of_removed(args: argparse.Namespace) -> int:
    """Delete the removed user's conversations if asked (`--delete-threads`, or yes on a terminal)."""
    name = args.name
    from ernie_ops.threads import database

    chat = config.load(args.config).chat
    url = database.existing_url(chat.history) if chat.history.enabled else None
    if args.delete_threads is False or (args.delete_threads is None and not sys.stdin.isatty()):
        return _kept(name, url)
    if not chat.history.enabled and args.delete_threads is None:
        return EXIT_OK  # no history kept: nothing to offer
    deleted = asyncio.run(_delete_threads(url, name, ask=args.delete_threads is None)) if url else 0
    if deleted is None:
        return _kept(name, url)
    else:
        from ernie_ops.chat.docs_session import forget_uploads_of

        try:
            uploads = f"{forget_uploads_of(chat.docs, name)} uploaded document(s) from this host's docs index"
        except ErnieOpsError as exc:  # the conversations are gone all the same; the app's daily sweep drops the rest
            uploads = f"none of their uploads from this host's docs index ({exc}; the chat app's daily sweep removes them)"
        plain(
            f"deleted {deleted} conversation(s) of {name} from the chat history and {uploads} "
            "(other chat hosts remove theirs at their daily sweep)",
            err=True,
        )
    return EXIT_OK


def _kept(name: str, url: str | None) -> int:
    """The removed user's conversations stay, under an id no login can have: a new user of that name starts without them."""
    again = f"ernie-ops chat-user remove {name} --delete-threads"
    retired = asyncio.run(_retire(url, name)) if url else None
    where = f" as {retired}: a new user named {name} does not get them" if retired else ""
    plain(f"kept {name}'s conversations in the chat history{where} (to delete them: {again})", err=True)
    return EXIT_OK


async def _retire(url: str, name: str) -> str:
    from ernie_ops.threads.store import ThreadStore

    store = await ThreadStore.open(url)
    try:
        return await store.retire_threads_of(name)
    finally:
        await store.close()


async def _delete_threads(url: str, name: str, *, ask: bool) -> int | None:
    """How many of `name`'s threads were deleted; None when the operator said no."""
    from rich.prompt import Confirm

    from ernie_ops.threads.store import ThreadStore

    store = await ThreadStore.open(url)
    try:
        count = await store.count_threads_of(name)
        if ask and count and not Confirm.ask(f"delete {name}'s {count} conversation(s) from the chat history too?", default=False):
            return None
        deleted = await store.delete_threads_of(name)
        await store.delete_user(name)
        return deleted
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    path = args.users_file or config.load(args.config).chat.users_file
    if args.user_command == "list":
        for name in sorted(users.load(path)):
            out_console.print(name)
        return EXIT_OK
    if args.user_command == "remove":
        if args.delete_threads and args.name not in users.load(path):  # removed before, conversations kept then
            plain(f"{args.name} is not in {path}; deleting their conversations only", err=True)
        else:
            users.remove(path, args.name)
            plain(f"removed {args.name} from {path}", err=True)
        return _threads_of_removed(args)
    users.check_new(args.name, "x" * users.MIN_PASSWORD)  # a bad name fails before the password is asked
    created = users.add(path, args.name, _read_password())
    err_console.print(f"{'added' if created else 'new password for'} {args.name} in {path}")
    return EXIT_OK
