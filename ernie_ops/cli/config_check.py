"""`ernie-ops config check`: validate and print the resolved config, or every error."""

from __future__ import annotations

import argparse

from rich.syntax import Syntax

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import out_console, print_json
from ernie_ops.errors import EXIT_OK, ConfigError, ConfigProblem
from ernie_ops.evaluate import gate


def register(sub: Subcommands) -> None:
    c = sub.add_parser("config", help="inspect the config")
    csub = subcommands(c, "config_command")
    cc = csub.add_parser("check", help="validate and print the resolved config, or every error")
    cc.add_argument("--json", action="store_true", help="machine-readable output")
    cc.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    source = config.resolve_path(args.config)
    try:
        cfg = config.load(args.config)
        _check_files(cfg, source)
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
            print_json({"ok": False, "file": source, "problems": problems}, default=str, indent=2)
            return exc.exit_code
        raise
    if args.json:
        print_json({"ok": True, "file": source, "config": cfg.model_dump(mode="json")}, indent=2)
    else:
        out_console.print(f"[green]ok[/]: {source}")
        out_console.print(Syntax(config.dump(cfg), "yaml", theme="ansi_dark", background_color="default"))
    return EXIT_OK


def _check_files(cfg: config.Config, source: str) -> None:
    """Files the config names that only some commands read, checked here so a bad one shows before it is needed:
    the cutover's golden set (its own check at the cutover's preflight says the same)."""
    if problem := gate.set_problem(cfg.cutover.eval):
        raise ConfigError([ConfigProblem(source, None, "cutover.eval.file", cfg.cutover.eval.file, problem)])
