"""`ernie-ops layout`: the pool and instances this host runs (what provisioning writes into ernie.yaml)."""

from __future__ import annotations

import argparse
import os

from ernie_ops.cli.args import Subcommands, bounded
from ernie_ops.cli.console import out_console, print_json
from ernie_ops.errors import EXIT_OK, UsageError
from ernie_ops.host import gpus
from ernie_ops.serving import layout


def register(sub: Subcommands) -> None:
    p = sub.add_parser("layout", help="the pool and instances this host runs (one replica per GPU, or per core group)")
    p.add_argument("--accelerator", choices=("gpu", "cpu"), required=True, help="the engine the host runs (provisioning resolves it)")
    p.add_argument("--replicas", default="auto", help="replicas serving at once: a number, or auto (one per GPU / core group)")
    p.add_argument("--cores-per-replica", type=bounded("--cores-per-replica", 1, 1024), help="CPU host: cores of one replica")
    p.add_argument("--vcpus", type=bounded("--vcpus", 1, 4096), default=os.cpu_count() or 1, help="CPU host: its vCPUs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.replicas == "auto":
        replicas = None
    elif args.replicas.isdigit() and 1 <= int(args.replicas) <= 64:
        replicas = int(args.replicas)
    else:
        raise UsageError(f"--replicas {args.replicas!r}: give a number 1-64 or auto")
    listed = gpus.listed() if args.accelerator == "gpu" else []
    found = layout.layout(args.accelerator, replicas, listed, args.vcpus, args.cores_per_replica)
    if args.json:
        print_json(found.as_dict())
    else:
        out_console.print(f"{found.replicas} replica(s):")
        for inst in found.instances:
            device = f"gpu {inst['gpu']}" if "gpu" in inst else f"cores {inst['cpu_cores']}"
            slot = f" slot {inst['slot']}" if "slot" in inst else ""
            out_console.print(f"  port {inst['port']}: {device}{slot}")
    return EXIT_OK
