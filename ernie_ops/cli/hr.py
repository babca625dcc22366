"""`ernie-ops hr check FILE`: is an HR export fit to replace the one the onboarding helper reads (onboarding/export_check checks it).

Prints the number of employees and the records past the onboarding window (exit 0), or one sentence per bad
record (exit 2); Ansible runs it as `validate:` on a new export before it replaces the installed one.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import plain, print_json
from ernie_ops.errors import EXIT_OK, EXIT_USAGE, ConfigError, UsageError
from ernie_ops.onboarding import export_check
from ernie_ops.onboarding.config import OnboardingConfig


def register(sub: Subcommands) -> None:
    hr = sub.add_parser("hr", help="the onboarding helper's HR source")
    hsub = subcommands(hr, "hr_command")
    hc = hsub.add_parser("check", help="check an HR export file (CSV/YAML): the number of employees, or every bad record")
    hc.add_argument("file", metavar="FILE")
    hc.add_argument("--format", choices=export_check.FORMATS, help="csv or yaml (default: by the suffix of --name, else of FILE)")
    hc.add_argument("--name", help="the name the messages give FILE (e.g. the export it is a copy of)")
    hc.add_argument(
        "--active-days", type=int, metavar="N",
        help="days after the start date the helper serves (default: chat.onboarding.active_days of the config, "
        "or its built-in default when no config can be read); records past it are listed as info",
    )  # fmt: skip
    hc.add_argument("--json", action="store_true", help="machine-readable report")
    hc.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    report = export_check.check(args.file, args.format, args.name, active_days=active_days(args.active_days, args.config))
    if args.json:
        print_json({**asdict(report), "ok": report.ok}, indent=2, ensure_ascii=False)
        return EXIT_OK if report.ok else EXIT_USAGE
    if report.ok:
        plain(f"{report.file}: {report.employees} employee{'s' if report.employees != 1 else ''} ({report.format})")
    if report.outside_window:
        over = len(report.outside_window)
        plain(f"info: {over} employee{'s' if over != 1 else ''} past the onboarding window (start + {report.active_days} days):")
        for line in report.outside_window:
            plain(f"info:   {line}")
    if not report.ok:
        for problem in report.problems:
            plain(f"error: {problem}", err=True)
        bad = len(report.problems)
        plain(f"{report.file}: {bad} problem{'s' if bad != 1 else ''}; fix the export and check it again", err=True)
    return EXIT_OK if report.ok else EXIT_USAGE


def active_days(explicit: int | None, config_path: str | None) -> int:
    """--active-days, else the config's chat.onboarding.active_days, else the built-in default: the check runs
    where the export is installed, usually beside the config, but a copy checked elsewhere needs no config."""
    if explicit is not None:
        if explicit < 0:
            raise UsageError(f"--active-days {explicit}: must be 0 or more (days after the start date)")
        return explicit
    try:
        return config.load(config_path).chat.onboarding.active_days
    except ConfigError:
        return OnboardingConfig().active_days
