"""Is `ernie-ops bench` the bottleneck? Its ceiling vs `vllm bench serve`'s, side by side, one run.

A fast STUB server (tests/harness/fast_stub.py, 16 SSE chunks per completion) stands in for the
engine: only a load generator's own ceiling is measured. Concurrency 64, alternating rounds:
  vllm bench serve (aiohttp), ernie-ops bench (default workers), ernie-ops bench --processes 1,
  and one process on httpx's default transport (h11) for reference.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.bench_ceiling [ROUNDS]
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ernie_ops.observe import bench
from tests.conftest import CACHE, free_port
from tests.harness import tiny_model

HERE = Path(__file__).resolve().parent
STUB = HERE.parent / "tests" / "harness" / "fast_stub.py"
N = 3000
CONCURRENCY = 64


def vllm_bench(url: str, tokenizer: Path) -> float:
    cmd = [
        sys.executable, "-m", "benchmarks.vllm_bench_serve", "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", "stub", "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "32",
        "--random-output-len", "16", "--ignore-eos", "--num-prompts", str(N), "--max-concurrency", str(CONCURRENCY),
        "--request-rate", "inf", "--disable-tqdm", "--ready-check-timeout-sec", "0",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, timeout=600).stdout
    m = re.search(r"Request throughput \(req/s\):\s+([0-9.]+)", out)
    if not m:
        raise RuntimeError(out[-2000:])
    return float(m.group(1))


def ernie_bench(url: str, processes: int, transport: str = "aiohttp") -> bench.BenchReport:
    spec = bench.BenchSpec(
        url=url, model="stub", concurrency=CONCURRENCY, duration=None, count=N, prompt_tokens=32, max_tokens=16,
        processes=processes, transport=transport,
    )  # fmt: skip
    return bench.run(spec)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    model = tiny_model.cached(CACHE / "models")
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(STUB), str(port), "16"])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        rows = []
        for r in range(rounds):
            v = vllm_bench(url, model)
            e = ernie_bench(url, 0)
            one = ernie_bench(url, 1)
            plain = ernie_bench(url, 1, transport="httpx")
            assert e.failed == 0 and one.failed == 0 and plain.failed == 0, (e.errors, one.errors, plain.errors)
            rows.append((v, e.qps, one.qps))
            workers = bench.BenchSpec(url, "stub", CONCURRENCY).worker_count()
            print(f"round {r + 1}: vllm bench serve {v:.0f} req/s | ernie-ops bench {e.qps:.0f} req/s ({workers} workers) "
                  f"| 1 process {one.qps:.0f} | 1 process on httpx's own transport {plain.qps:.0f}", flush=True)  # fmt: skip
        best_v = max(v for v, _, _ in rows)
        best_e = max(e for _, e, _ in rows)
        print(f"ceiling: ernie-ops bench {best_e:.0f} / vllm bench serve {best_v:.0f} = {best_e / best_v:.2f}")
    finally:
        stub.terminate()
        stub.wait(timeout=10)


if __name__ == "__main__":
    main()
