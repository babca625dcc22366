"""bf16 vs float32 on the CPU path: the same tiny model, the same load, side by side in one run.

Two real instances through the real launcher (`ernie-ops serve`, so the engine's sitecustomize asks for AMX
where the CPU has it), one `vllm.dtype: bfloat16`, one `float32`, each on its own core. Each round benches
them one after the other with the same `ernie-ops bench` load (8 concurrent streams, 64-token prompts,
32-token replies, 96 requests), alternating which goes first. Prints each round, the medians and the ratio,
and whether AMX was there to use. Asserts nothing.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.dtype_cost [ROUNDS]   (about 2 minutes + 30 s a round)
"""

from __future__ import annotations

import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from ernie_ops.observe import bench
from tests.conftest import CACHE, free_port, write_config
from tests.harness import serve_proc, tiny_model
from tests.harness.tiny_model import SERVED_NAME

DTYPES = ("bfloat16", "float32")


def load(port: int) -> bench.BenchReport:
    spec = bench.BenchSpec(
        url=f"http://127.0.0.1:{port}", model=SERVED_NAME, concurrency=8, duration=None, count=96,
        prompt_tokens=64, max_tokens=32, processes=1,
    )  # fmt: skip
    report = bench.run(spec)
    if report.failed:
        raise RuntimeError(f"{report.failed} requests failed: {report.errors}")
    return report


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    model = tiny_model.cached(CACHE / "models")
    work = Path(tempfile.mkdtemp(prefix="eo-dt-", dir="/var/tmp"))
    started: dict[str, tuple[int, serve_proc.ServeProcess]] = {}
    try:
        for core, dtype in enumerate(DTYPES):
            port = free_port()
            cfg = write_config(work / f"{dtype}.yaml", model, [port], work / f"cache-{dtype}", vllm={"dtype": dtype})
            data = yaml.safe_load(cfg.read_text())
            data["instances"] = [{"port": port, "cpu_cores": str(core)}]  # each its own core
            cfg.write_text(yaml.safe_dump(data, sort_keys=False))
            started[dtype] = (port, serve_proc.start(cfg, port, work / dtype))
        for _, sp in started.values():
            sp.wait_ready()
        amx_cpu = "amx_tile" in Path("/proc/cpuinfo").read_text()
        said = {m for _, sp in started.values() for m in re.findall(r"ernie-ops engine-site: pid \d+: (AMX: [^\n]*)", sp.log)}
        print(f"AMX in /proc/cpuinfo: {amx_cpu}; the engines' sitecustomize said: {sorted(said)}", flush=True)
        results: dict[str, list[bench.BenchReport]] = {d: [] for d in DTYPES}
        for r in range(rounds):
            order = DTYPES if r % 2 == 0 else DTYPES[::-1]
            for dtype in order:
                results[dtype].append(load(started[dtype][0]))
            print(
                f"round {r + 1}: "
                + " | ".join(f"{d} {results[d][-1].qps:.1f} req/s, TTFT p50 {results[d][-1].ttft_p50 * 1000:.0f} ms" for d in DTYPES),
                flush=True,
            )
        qps = {d: statistics.median(x.qps for x in results[d]) for d in DTYPES}
        ttft = {d: statistics.median(x.ttft_p50 for x in results[d]) for d in DTYPES}
        print("| dtype | req/s (median) | TTFT p50 (median) |\n|---|---|---|")
        for d in DTYPES:
            print(f"| {d} | {qps[d]:.1f} | {ttft[d] * 1000:.0f} ms |")
        print(f"bf16/float32: req/s {qps['bfloat16'] / qps['float32']:.2f}x, TTFT p50 {ttft['bfloat16'] / ttft['float32']:.2f}x")
    finally:
        for _, sp in started.values():
            sp.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
