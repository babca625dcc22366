"""`ernie-ops cutover [PORT]` and `ernie-ops rollback`: move traffic between instances (the runbook in traffic/cutover)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, port
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK, UsageError
from ernie_ops.traffic.runbook import Outcome, Timeouts


def register(sub: Subcommands) -> None:
    for name, helptext in (
        ("cutover", "move traffic to instance PORT with zero lost requests"),
        ("rollback", "back to the previous instance"),
    ):
        cp = sub.add_parser(name, help=helptext)
        if name == "cutover":
            cp.add_argument("port", type=port, nargs="?", help="the instance to route to")
            cp.add_argument("--from", dest="source", type=port, help="the instance to retire (default: the routed one)")
            cp.add_argument("--canary", metavar="STEPS", help="percent steps before 100%%, e.g. 5,25,50 (default: cutover.canary_steps)")
            cp.add_argument(
                "--bake", metavar="DURATION", help="watch with the old instance warm, e.g. 10m; 0: none (default: cutover.bake_seconds)"
            )
            cp.add_argument("--sticky", choices=("none", "api_key", "client"), help="keep a client on one side during canary steps")
            end = cp.add_mutually_exclusive_group()
            end.add_argument("--promote", action="store_true", help="end the canary/bake in progress: all traffic to the new instance")
            end.add_argument("--abort", action="store_true", help="end the canary/bake in progress: all traffic back to the old instance")
        cp.add_argument("--start-timeout", type=float, default=900.0, help="seconds for the new instance to become READY")
        cp.add_argument("--verify-timeout", type=float, default=15.0, help="seconds for the gateway to answer from the new port")
        cp.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to wait for the old instance to go idle")
        cp.add_argument("--dry-run", action="store_true", help="run the preflight and print the plan only")
        cp.add_argument("--json", action="store_true", help="machine-readable result")
        cp.set_defaults(func=run)


def _print_step(step) -> None:
    mark = "[green]✓[/]" if step.ok else "[red]✗[/]"
    err_console.print(f"{mark} {step.name:<24} {step.seconds:7.2f}s  {step.detail}", soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    # lazy: the runbook and its canary add ~60 ms (httpx, prometheus_client) to every other command's start-up
    from ernie_ops.traffic import cutover
    from ernie_ops.traffic.canary import rollout

    cfg = config.load(args.config)
    if cfg.pool.replicas > 1:  # the runbook moves traffic between two ports; a pool's replicas move one slot at a time
        raise UsageError(
            f"this host serves a pool of {cfg.pool.replicas} replicas (pool.replicas): `ernie-ops {args.command}` moves traffic "
            "between two instances; a pool's replicas are replaced one by one by `ernie-ops apply` after their files changed "
            "(site.yml and upgrade.yml run it)"
        )
    timeouts = Timeouts(start=args.start_timeout, verify=args.verify_timeout, drain=args.drain_timeout)
    on_step = None if args.json else _print_step
    if args.command == "rollback":
        result = cutover.rollback(cfg, timeouts=timeouts, dry_run=args.dry_run, on_step=on_step)
    elif args.promote or args.abort:
        if args.port is not None or args.canary or args.bake or args.source:
            raise UsageError("--promote / --abort end the rollout in progress; give no port, --from, --canary or --bake")
        result = cutover.end_rollout(cfg, "promote" if args.promote else "abort", timeouts=timeouts, on_step=on_step)
    else:
        if args.port is None:
            raise UsageError("name the instance to route to: ernie-ops cutover PORT (or --promote / --abort)")
        plan = rollout.Plan.chosen(cfg.cutover, args.canary, args.bake, args.sticky)
        job = cutover.Cutover(cfg, args.port, source=args.source, timeouts=timeouts, dry_run=args.dry_run, on_step=on_step, plan=plan)
        if plan.watched:
            rollout.abort_on_signals(Path(cfg.paths.state_dir))  # Ctrl-C during the watch = --abort
            if not args.json:
                err_console.print(f"plan: {plan.describe()} (Ctrl-C rolls back)")
        result = job.run()
    if args.json:
        print_json(result.as_dict(), indent=2)
    else:
        for w in result.warnings:
            err_console.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
        if result.ok:
            messages = {
                Outcome.PROMOTED: f"traffic on {result.target}, {result.source} retired after the watch",
                Outcome.ALREADY_ACTIVE: f"{result.target} is already the routed instance and serves; nothing changed",
                Outcome.CONVERGED: f"{result.target} was already routed; finished the interrupted cutover",
                Outcome.DRY_RUN: "dry run: preflight passed, nothing changed",
            }
            out_console.print(f"[green]{args.command} {result.outcome}[/]: {messages.get(result.outcome, f'traffic on {result.target}')}")
        else:
            where = f"; {result.where}" if result.where else ""  # the runbook's own words, from what the gateway answered
            err_console.print(f"[red]{args.command} {result.outcome}[/]: {result.error}{where}", soft_wrap=True)
    return EXIT_OK if result.ok else EXIT_FAILED
