"""`ernie-ops route`: the routed instance and the spare; on a fresh host, the initial route."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, port
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_OK, UsageError


def register(sub: Subcommands) -> None:
    rt = sub.add_parser("route", help="the routed instance and the spare (a fresh host: the initial route)")
    rt.add_argument("--initial", type=port, help="port routed first on a fresh host (default: the first configured instance)")
    rt.add_argument("--init", action="store_true", help="fresh host: write the upstream include naming the initial port")
    rt.add_argument("--check", action="store_true", help="with --init: say whether it would write, write nothing")
    rt.add_argument("--json", action="store_true", help="machine-readable output")
    rt.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ernie_ops.operate import apply  # lazy: +25 ms start-up (-X importtime); only route and apply need it

    cfg = config.load(args.config)
    if args.check and not args.init:
        raise UsageError("--check goes with --init")
    r = apply.init_route(cfg, args.initial, check=args.check) if args.init else apply.route(cfg, args.initial)
    if args.json:
        print_json(r.as_dict(), indent=2)
    else:
        how = "initial route of a fresh host" if r.initial else f"from {r.upstream_file}"
        wrote = (" (would write it)" if args.check else f" (wrote {r.upstream_file})") if r.changed else ""
        if r.replicas:  # a pool: a replica per slot
            out_console.print(f"pool of {len(r.replicas)}: {', '.join(map(str, r.replicas))} ({how}){wrote}")
        else:
            out_console.print(f"routed: {r.routed_port} ({how}){wrote}; spare: {r.spare_port if r.spare_port is not None else 'none'}")
        for w in r.warnings:
            err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK
