"""The parser every command group's `register` builds on: short usage errors (exit 2) and shared argument types."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit

from ernie_ops.cli.console import err_console
from ernie_ops.errors import EXIT_USAGE

Subcommands = argparse._SubParsersAction  # what `register(sub)` receives: `sub.add_parser(...)`


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is 2 as well; keep the message short
        self.print_usage(sys.stderr)
        err_console.print(f"[red]error:[/] {message}")
        raise SystemExit(EXIT_USAGE)


def subcommands(parser: argparse.ArgumentParser, dest: str) -> Subcommands:
    """A command group's own subcommands (`ernie-ops docs add`), parsed by `Parser` like the top level."""
    return parser.add_subparsers(dest=dest, required=True, parser_class=Parser)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1024-65535")
    return value


def remote_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise argparse.ArgumentTypeError(f"'{text}' is not a gateway URL like http://10.0.0.5:80 (scheme, address, optional port)")
    return text.rstrip("/")


def bounded(name: str, low: int, high: int):
    """An integer argument type that names the option and its range when the value is outside it."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} '{text}' is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {value} is outside {low}..{high}")
        return value

    return parse
