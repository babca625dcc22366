"""TTFT through the gateway vs directly to the instance (goal: p50 ratio <= 1.10), side by side.

One real vLLM instance (tiny model) and the shipped nginx site in front of it; alternating rounds
of `ernie-ops bench` (4 streams, 64 in / 32 out) direct and via nginx.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.gateway_overhead [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from ernie_ops.observe import bench
from tests.conftest import CACHE, free_port, write_config
from tests.harness import nginx, serve_proc, tiny_model


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    model = tiny_model.cached(CACHE / "models")
    with tempfile.TemporaryDirectory(prefix="eo-ovh-", dir="/var/tmp") as d:
        work = Path(d)
        port = free_port()
        sp = serve_proc.start(write_config(work / "ernie.yaml", model, [port], work / "cache"), port, work)
        ng = nginx.prepare(work / "nginx", free_port(), port)
        try:
            sp.wait_ready()
            ng.start()
            ratios, ttft = [], {"direct": [], "nginx": []}
            for r in range(rounds):
                p50 = {}
                for name, url in (("direct", f"http://127.0.0.1:{port}"), ("nginx", ng.url)):
                    spec = bench.BenchSpec(url=url, model=tiny_model.SERVED_NAME, concurrency=4, duration=None, count=200,
                                           prompt_tokens=64, max_tokens=32, processes=1)  # fmt: skip
                    rep = bench.run(spec)
                    assert rep.failed == 0, rep.errors
                    p50[name] = rep.ttft_p50
                    ttft[name].append(rep.ttft_p50)
                ratios.append(p50["nginx"] / p50["direct"])
                print(f"round {r + 1}: TTFT p50 direct {p50['direct'] * 1000:.1f} ms, via nginx {p50['nginx'] * 1000:.1f} ms, "
                      f"ratio {ratios[-1]:.3f}", flush=True)  # fmt: skip
            print(f"TTFT p50 via nginx / direct: median ratio {statistics.median(ratios):.3f} over {rounds} rounds (goal <= 1.10)")
        finally:
            ng.stop()
            sp.stop()


if __name__ == "__main__":
    main()
