"""`ernie-ops` itself (its CLI: argument parsing, output, exit code) on the integration tier's ProcessHost, as its own
process: the operator's command, with systemd's part (start/stop of ernie-vllm@PORT) replaced by the bookkeeping of
tests/harness/process_host.py, since this tier has no systemd. Everything else the cutover does is real: nginx, the
probe gate, the quality gate's golden set against the instances, /metrics.

Usage: python -m tests.harness.cutover_cli MARKS ERNIE-OPS-ARGS...
"""

from __future__ import annotations

import sys
from pathlib import Path

from ernie_ops import cli
from ernie_ops.traffic import cutover
from tests.harness.process_host import ProcessHost


def main() -> int:
    marks = Path(sys.argv[1])
    cutover.RealHost = lambda cfg: ProcessHost(cfg, marks)  # the runbook's default host: units are processes here
    return cli.main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
