"""`ernie-ops apply`: after provisioning changed files, start, cut over or restart what runs older inputs."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ernie_ops.cli.args import Subcommands, port
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK


def register(sub: Subcommands) -> None:
    ap = sub.add_parser("apply", help="after provisioning changed files: start, cut over or restart what runs older inputs")
    ap.add_argument("--only", choices=("engine", "chat"), help="one service (default: both)")
    ap.add_argument("--mode", choices=("cutover", "restart", "none"), default="cutover", help="how a changed engine input reaches traffic")
    ap.add_argument("--initial", type=port, help="port routed first on a fresh host (default: the first configured instance)")
    ap.add_argument("--no-start", action="store_true", help="do not start a service that is not running")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds for a starting instance to become READY")
    ap.add_argument("--check", action="store_true", help="report what would be done, do nothing")
    ap.add_argument("--json", action="store_true", help="machine-readable result")
    ap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ernie_ops.operate import apply  # lazy: +25 ms start-up (-X importtime); only route and apply need it

    cfg, path = apply.load_for(args.config)
    services = (args.only,) if args.only else ("engine", "chat")
    if not args.json:
        err_console.print(f"apply ({'check only, ' if args.check else ''}mode {args.mode}): reading {', '.join(services)} ...")
    res = apply.apply(
        cfg, path, services, mode=args.mode, check=args.check, start=not args.no_start, initial=args.initial,
        start_timeout=args.start_timeout,
    )  # fmt: skip
    if args.json:
        print_json(res.as_dict(), indent=2)
    else:
        for a in res.actions:
            if a.error:
                mark, what = "[red]✗[/]", f"{a.action} failed: {a.error}"
            elif a.action in ("none", "pending"):
                mark, what = "[yellow]![/]" if a.action == "pending" else "[green]=[/]", a.reason
            else:
                verb = "would " + a.action if args.check else a.action
                mark, what = "[green]✓[/]", f"{verb}{' -> ' + a.target if a.target and a.target != a.unit else ''}: {a.reason}"
            out_console.print(f"{mark} {a.service:<6} {a.unit}: {escape(what)}", soft_wrap=True)
        for w in res.warnings:
            err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK if res.ok else EXIT_FAILED
