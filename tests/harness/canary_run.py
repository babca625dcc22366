"""`ernie-ops cutover` with canary/bake on the integration tier's ProcessHost, as its own process (so a test
can kill -9 it mid-rollout). Steps go to stderr as they happen; the result as JSON on stdout.

Usage: python -m tests.harness.canary_run CONFIG MARKS PORT [--canary 5,25] [--bake 30] [--promote|--abort]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ernie_ops import config
from ernie_ops.traffic import cutover, runbook
from ernie_ops.traffic.canary import rollout
from tests.harness.process_host import ProcessHost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("marks")
    ap.add_argument("port", type=int, nargs="?")
    ap.add_argument("--canary", default="")
    ap.add_argument("--bake", default="0")
    ap.add_argument("--action", choices=("promote", "abort"))
    a = ap.parse_args()
    cfg = config.load(a.config)
    host = ProcessHost(cfg, Path(a.marks))

    def on_step(step: runbook.Step) -> None:
        print(f"{step.name}: {step.detail}", file=sys.stderr, flush=True)

    if a.action:
        res = cutover.end_rollout(cfg, a.action, host=host, on_step=on_step)
    else:
        plan = rollout.Plan(rollout.parse_steps(a.canary) if a.canary else [], rollout.parse_duration(a.bake))
        rollout.abort_on_signals(Path(cfg.paths.state_dir))  # as `ernie-ops cutover` does
        res = cutover.Cutover(cfg, a.port, host=host, plan=plan, on_step=on_step).run()
    print(json.dumps(res.as_dict()))


if __name__ == "__main__":
    main()
