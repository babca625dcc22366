"""`ernie-ops`: argument parsing, human (rich) or machine (--json) output, exit codes.

Exit codes: 0 ok, 1 the action failed, 2 usage or config error. Every action is a function in
another module; this file only parses, calls and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.syntax import Syntax

from ernie_ops import __version__, config
from ernie_ops.errors import EXIT_OK, EXIT_USAGE, ConfigError, ErnieOpsError

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1024-65535")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is 2 as well; keep the message short
        self.print_usage(sys.stderr)
        err_console.print(f"[red]error:[/] {message}")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ernie-ops", description="Operate ERNIE-4.5-0.3B-PT on vLLM behind systemd and nginx.")
    p.add_argument("--version", action="version", version=f"ernie-ops {__version__}")
    p.add_argument("--config", help=f"config file (default: ${config.ENV_VAR} or {config.DEFAULT_PATH})")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("serve", help="run one vLLM instance under systemd (the unit's ExecStart)")
    s.add_argument("port", type=_port)
    s.set_defaults(func=cmd_serve)

    c = sub.add_parser("config", help="inspect the config")
    csub = c.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    cc = csub.add_parser("check", help="validate and print the resolved config, or every error")
    cc.add_argument("--json", action="store_true", help="machine-readable output")
    cc.set_defaults(func=cmd_config_check)
    return p


def cmd_serve(args: argparse.Namespace) -> int:
    from ernie_ops import launcher

    launcher.setup_logging()
    cfg = config.load(args.config)
    return launcher.serve(cfg, args.port)


def cmd_config_check(args: argparse.Namespace) -> int:
    source = config.resolve_path(args.config)
    try:
        cfg = config.load(args.config)
    except ConfigError as exc:
        if args.json:
            problems = [
                {
                    "file": p.file,
                    "line": p.line,
                    "field": p.field,
                    "value": None if p.value is config.MISSING else p.value,
                    "message": p.message,
                }
                for p in exc.problems
            ]
            print(json.dumps({"ok": False, "file": source, "problems": problems}, default=str, indent=2))
            return exc.exit_code
        raise
    if args.json:
        print(json.dumps({"ok": True, "file": source, "config": cfg.model_dump(mode="json")}, indent=2))
    else:
        out_console.print(f"[green]ok[/]: {source}")
        out_console.print(Syntax(config.dump(cfg), "yaml", theme="ansi_dark", background_color="default"))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ErnieOpsError as exc:
        err_console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
