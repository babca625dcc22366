"""`ernie-ops eval FILE`: a golden set against the gateway (default) or one instance; the pass rate and the failing cases.

Exit codes: 0 the weighted pass rate reached --min-pass-rate, 3 (EXIT_BELOW) it did not, 1 the model could not be
reached, 2 a bad set, config or flag.
"""

from __future__ import annotations

import argparse

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, port
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_BELOW, EXIT_OK

# A golden set lists answers the served model is known to give; greedy decoding makes them repeatable, so a
# model fit to serve passes every case, and one failure is already an answer that changed. A set that also holds
# cases the model is not expected to pass says so on the command line (or the gate's own minimum).
DEFAULT_MIN_PASS_RATE = 1.0


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1 (e.g. 0.8)")
    return value


def register(sub: Subcommands) -> None:
    e = sub.add_parser("eval", help="run a golden set (YAML) against the gateway or one instance: pass rate, failing answers")
    e.add_argument("file", metavar="FILE", help="the golden set, e.g. ernie_ops/data/eval/smoke.yaml")
    target = e.add_mutually_exclusive_group()
    target.add_argument("--port", type=port, help="one instance on 127.0.0.1, bypassing nginx")
    target.add_argument("--gateway", action="store_true", help="through gateway.url (the default)")
    e.add_argument("--min-pass-rate", type=_rate, default=DEFAULT_MIN_PASS_RATE, metavar="R",
                   help=f"the weighted pass rate needed for exit 0 (default {DEFAULT_MIN_PASS_RATE:g}: every case)")  # fmt: skip
    e.add_argument("--json", action="store_true", help="machine-readable report")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: the chat and docs pipelines, only eval needs them
    from ernie_ops.evaluate import golden
    from ernie_ops.evaluate import run as evaluate

    loaded = golden.load(args.file)  # a bad set is reported before the config is even read
    cfg = config.load(args.config)
    target = evaluate.Target.for_instance(cfg, args.port) if args.port else evaluate.Target.for_gateway(cfg)
    if args.json:
        report = evaluate.run_cases_sync(loaded, target)
        print_json(report.as_dict() | {"min_pass_rate": args.min_pass_rate, "ok": report.pass_rate >= args.min_pass_rate},
                   indent=2, ensure_ascii=False)  # fmt: skip
    else:
        with err_console.status(f"eval {args.file}: {len(loaded.golden.cases)} case(s) against {target.url}"):
            report = evaluate.run_cases_sync(loaded, target)
        _print(report, args.min_pass_rate)
    return EXIT_OK if report.pass_rate >= args.min_pass_rate else EXIT_BELOW


def _print(report, min_rate: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"ernie-ops eval: {report.target}")
    for col in ("case", "kind", "weight", "result", "seconds", "answer / what failed"):
        t.add_column(col, overflow="fold")
    for c in report.cases:
        detail = escape(c.answer.strip().replace("\n", " ")[:200])
        if c.failures:
            detail = "[red]" + escape("; ".join(c.failures)) + "[/]\n" + detail
        result = "[green]pass[/]" if c.passed else "[red]FAIL[/]"
        t.add_row(escape(c.id), c.kind, f"{c.weight:g}", result, f"{c.seconds:.1f}", detail)
    out_console.print(t)
    ok = report.pass_rate >= min_rate
    colour = "green" if ok else "red"
    passed = len(report.cases) - len(report.failing)
    out_console.print(
        f"[{colour}]pass rate {report.pass_rate:.1%}[/] (weighted; {passed} of {len(report.cases)} cases passed) "
        f"in {report.seconds:.1f} s; "
        f"needed {min_rate:.0%}: {'ok' if ok else 'below'}"
    )
