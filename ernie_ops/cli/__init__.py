"""`ernie-ops`: argument parsing, human (rich) or machine (--json) output, exit codes.

Exit codes: 0 ok, 1 the action failed, 2 usage or config error. Every action is a function in another
package; the modules here only parse, call and print.

One way to add a command: a module here with `register(sub)`, which adds its parser (and its own
subcommands through `args.subcommands`) and sets `func` to its `run...(args) -> int`, listed in
`GROUPS`. Each prints through `console` (its consoles, `print_json`); an ErnieOpsError it raises is
printed here, once, as `error: ...`, and its exit code returned.

Start-up: every group module is imported to build the parser, so a feature module that adds more than
~10 ms (python -X importtime, beyond this package's own imports) is imported inside the `run` that needs
it, its cost beside it. Importing them all here would double `ernie-ops --help` (about 0.3 s to 0.6 s).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from ernie_ops import __version__, config
from ernie_ops.cli import (
    apply,
    bench,
    chat,
    chat_user,
    config_check,
    copy,
    cutover,
    docs,
    evaluate,
    gateway,
    hr,
    layout,
    logs,
    monitoring,
    pool,
    route,
    serve,
    status,
    top,
)
from ernie_ops.cli.args import Parser
from ernie_ops.cli.console import err_console, print_error
from ernie_ops.errors import ErnieOpsError

# The command groups in the order `ernie-ops --help` lists them.
GROUPS = (
    serve, cutover, bench, evaluate, logs, top, monitoring, gateway, status, route, layout, pool, apply, config_check, chat, docs, hr, copy,
    chat_user,
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ernie-ops", description="Operate ERNIE-4.5-0.3B-PT on vLLM behind systemd and nginx.")
    p.add_argument("--version", action="version", version=f"ernie-ops {__version__}")
    p.add_argument("--config", help=f"config file (default: ${config.ENV_VAR} or {config.DEFAULT_PATH})")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in GROUPS:
        group.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ErnieOpsError as exc:
        print_error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
