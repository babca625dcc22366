"""`ernie-ops status`: instances, health, load, and where nginx routes."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK


def register(sub: Subcommands) -> None:
    st = sub.add_parser("status", help="instances, health, load, and where nginx routes")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ernie_ops.observe import status, status_view  # lazy: +48 ms start-up (-X importtime); only status needs it

    cfg = config.load(args.config)
    st = status.collect(cfg)
    if args.json:
        print_json(st.as_dict(), indent=2)
        return EXIT_OK if st.ok else EXIT_FAILED
    for part in status_view.render(st):
        out_console.print(part)
    for p in st.problems:
        err_console.print(f"[red]problem:[/] {p}", soft_wrap=True)
    for w in st.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK if st.ok else EXIT_FAILED
