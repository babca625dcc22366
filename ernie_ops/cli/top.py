"""`ernie-ops top`: live per-instance numbers over a sliding window."""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.cli.args import Subcommands
from ernie_ops.cli.console import out_console, print_json
from ernie_ops.errors import EXIT_OK, UsageError


def register(sub: Subcommands) -> None:
    tp = sub.add_parser("top", help="live: each instance's req/s, queue, KV cache, TTFT, errors over a sliding window")
    tp.add_argument("--window", type=float, default=10.0, help="seconds the numbers cover (deltas of vLLM's counters)")
    tp.add_argument("--interval", type=float, default=1.0, help="seconds between frames")
    tp.add_argument("--once", action="store_true", help="one frame (two scrapes --interval apart), then exit")
    tp.add_argument("--json", action="store_true", help="with --once: the frame as JSON")
    tp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import httpx

    from ernie_ops.observe import top, top_view  # lazy: +44 ms start-up (-X importtime); only top needs it

    cfg = config.load(args.config)
    if args.window <= 0 or args.interval <= 0 or args.interval > args.window:
        raise UsageError("--window and --interval must be positive, and --interval at most --window")
    if args.json and not args.once:
        raise UsageError("--json prints one frame: use it with --once")
    with httpx.Client(verify=cfg.gateway.tls_verify()) as client:
        frames = top.frames(cfg, args.window, args.interval, client)
        if args.once:
            frame = next(frames)
            if args.json:
                print_json(frame.as_dict(), indent=2)
            else:
                out_console.print(top_view.render(frame))
            return EXIT_OK
        top_view.live(frames, out_console)
    return EXIT_OK
