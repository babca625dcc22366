"""`ernie-ops monitoring render`: what Prometheus scrapes here (the ernie_monitoring role writes the files)."""

from __future__ import annotations

import argparse
import os

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, remote_url, subcommands
from ernie_ops.cli.console import print_json
from ernie_ops.errors import EXIT_OK


def register(sub: Subcommands) -> None:
    mo = sub.add_parser("monitoring", help="what Prometheus scrapes here: targets, probes, its config (the ernie_monitoring role)")
    mosub = subcommands(mo, "monitoring_command")
    mr = mosub.add_parser("render", help="every monitoring file as JSON {name: text}: prometheus.yml, blackbox.yml, file_sd, paths")
    mr.add_argument("--host", required=True, help="the host label of every series (the inventory name)")
    mr.add_argument("--sd-dir", default="/etc/prometheus/file_sd", help="where the file_sd files go")
    mr.add_argument("--rules", action="append", help="a rule file prometheus.yml loads (repeatable)")
    mr.add_argument("--node", default="127.0.0.1:9100", help="the node exporter's address ('' for none)")
    mr.add_argument("--blackbox", default="127.0.0.1:9115", help="the blackbox exporter's address ('' for none)")
    mr.add_argument("--probe-key-file", help="the file holding the bearer key the completion probe sends (gateway with API keys)")
    mr.add_argument("--remote-url", type=remote_url, help="this gateway's URL from a central Prometheus: adds remote/*@HOST.json")
    mr.set_defaults(func=run_render)


def run_render(args: argparse.Namespace) -> int:
    from ernie_ops.observe import monitoring  # lazy: +12 ms start-up (-X importtime); only monitoring render needs it

    cfg = config.load(args.config)
    files = monitoring.render(
        cfg, args.host, sd_dir=args.sd_dir, rules=tuple(args.rules or ("/etc/prometheus/rules/ernie-ops.rules.yml",)),
        node=args.node or None, blackbox=args.blackbox or None, ismount=os.path.ismount, remote_url=args.remote_url,
        probe_key_file=args.probe_key_file or None,
    )  # fmt: skip
    print_json(files, indent=2)
    return EXIT_OK
