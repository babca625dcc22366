"""`ernie-ops monitoring render`: the file_sd targets, probes, blackbox modules, Prometheus config and paths
textfile come from ernie.yaml alone (the role only writes them)."""

from __future__ import annotations

import json

import yaml

from ernie_ops import cli, config
from ernie_ops.observe import monitoring


def cfg(**over) -> config.Config:
    base = {"instances": [{"port": 8000}, {"port": 8001}], "model": {"served_name": "ernie-x", "path": "/srv/m/current"}}
    return config.Config(**{**base, **over})


def test_every_configured_instance_is_a_target_with_its_labels():
    got = monitoring.targets(cfg(), "gpu-a")
    assert got == [
        {"targets": ["127.0.0.1:8000"], "labels": {"host": "gpu-a", "port": "8000", "unit": "ernie-vllm@8000.service", "model": "ernie-x"}},
        {"targets": ["127.0.0.1:8001"], "labels": {"host": "gpu-a", "port": "8001", "unit": "ernie-vllm@8001.service", "model": "ernie-x"}},
    ]


def test_the_completion_probe_asks_the_served_model_for_one_token():
    modules = monitoring.blackbox_modules(cfg())["modules"]
    http = modules[monitoring.MODULE_COMPLETION]["http"]
    assert http["method"] == "POST" and json.loads(http["body"]) == {"model": "ernie-x", "prompt": "Hello", "max_tokens": 1}
    assert http["fail_if_body_not_matches_regexp"] == ['"choices"']
    assert modules[monitoring.MODULE_HEALTH]["http"]["method"] == "GET"
    assert "authorization" not in http  # an open gateway


def test_a_gateway_with_api_keys_gets_the_probe_key_from_a_file_never_in_the_config(tmp_path, capsys):
    path = tmp_path / "ernie.yaml"
    path.write_text("instances: [{port: 9000}]\n")
    args = ["--config", str(path), "monitoring", "render", "--host", "h", "--probe-key-file", "/etc/prometheus/ernie-probe.key"]
    assert cli.main(args) == 0
    modules = yaml.safe_load(json.loads(capsys.readouterr().out)["blackbox.yml"])["modules"]
    assert modules["ernie_completion"]["http"]["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/ernie-probe.key"}
    assert "authorization" not in modules["ernie_health"]["http"]  # /health asks for no key


def test_an_https_gateway_with_a_private_ca_is_probed_verifying_its_certificate():
    gateway = {"url": "https://gpu-a.example", "ca_file": "/etc/ernie-ops/tls/gateway.crt"}
    modules = monitoring.blackbox_modules(cfg(gateway=gateway))["modules"]
    for name in (monitoring.MODULE_HEALTH, monitoring.MODULE_COMPLETION):
        assert modules[name]["http"]["tls_config"] == {"ca_file": "/etc/ernie-ops/tls/gateway.crt"}
    assert "tls_config" not in monitoring.blackbox_modules(cfg())["modules"][monitoring.MODULE_HEALTH]["http"]


def test_the_prometheus_config_has_the_jobs_the_rules_read():
    conf = monitoring.prometheus_config(sd_dir="/sd", rules=["/r.yml"], node=True, blackbox="127.0.0.1:9115")
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert set(jobs) == {"ernie-vllm", "ernie-node", "ernie-gateway-health", "ernie-gateway-completion"}
    # this host's targets, then the other hosts' of a central Prometheus
    assert jobs["ernie-node"]["file_sd_configs"] == [{"files": ["/sd/ernie-node*.json", "/sd/remote/ernie-node@*.json"]}]
    probe = jobs["ernie-gateway-completion"]
    assert probe["params"] == {"module": ["ernie_completion"]}
    assert probe["file_sd_configs"] == [{"files": ["/sd/ernie-probes-completion*.json", "/sd/remote/ernie-probes-completion@*.json"]}]
    assert {"target_label": "__address__", "replacement": "127.0.0.1:9115"} in probe["relabel_configs"]
    assert conf["rule_files"] == ["/r.yml"]
    bare = monitoring.prometheus_config(sd_dir="/sd", rules=[], node=False, blackbox=None)
    assert [j["job_name"] for j in bare["scrape_configs"]] == ["ernie-vllm"]


def test_each_filesystem_holding_a_watched_path_is_one_series_naming_its_paths():
    mounts = {"/", "/srv"}
    text = monitoring.render(cfg(), "gpu-a", ismount=lambda p: p in mounts)["ernie_ops_paths.prom"]
    assert 'ernie_ops_path_info{mountpoint="/srv",paths="/srv/m"} 1.0' in text  # the versions' directory, not `current`
    # one series per filesystem: the rules join on the mount point, which must be unique
    assert 'ernie_ops_path_info{mountpoint="/",paths="/var/cache/ernie-ops, /var/lib/ernie-ops"} 1.0' in text
    assert text.count("ernie_ops_path_info{") == 2


def test_render_prints_every_file_as_json(tmp_path, capsys):
    path = tmp_path / "ernie.yaml"
    path.write_text(yaml.safe_dump({"model": {"served_name": "ernie-x"}, "instances": [{"port": 9000}]}))
    assert cli.main(["--config", str(path), "monitoring", "render", "--host", "h", "--sd-dir", "/sd", "--node", ""]) == 0
    files = json.loads(capsys.readouterr().out)
    assert set(files) == {"prometheus.yml", "blackbox.yml", "ernie-vllm.json", "ernie-probes-health.json",
                          "ernie-probes-completion.json", "ernie_ops_paths.prom", "scrape-targets.map"}  # fmt: skip
    prom = yaml.safe_load(files["prometheus.yml"])
    assert "ernie-node" not in [j["job_name"] for j in prom["scrape_configs"]]
    assert json.loads(files["ernie-vllm.json"])[0]["targets"] == ["127.0.0.1:9000"]
    assert json.loads(files["ernie-probes-health.json"])[0]["targets"] == ["http://127.0.0.1:80/health"]


def test_render_without_a_host_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "ernie.yaml"
    path.write_text("instances: [{port: 9000}]\n")
    try:
        code = cli.main(["--config", str(path), "monitoring", "render"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--host" in capsys.readouterr().err


def test_the_gateway_scrape_map_names_every_instance_and_the_node_exporter():
    text = monitoring.scrape_map(cfg(), node="127.0.0.1:9100")
    entries = [line for line in text.splitlines() if not line.startswith("#")]
    assert entries == ["/metrics/8000 127.0.0.1:8000;", "/metrics/8001 127.0.0.1:8001;", "/metrics/node 127.0.0.1:9100;"]
    assert "/metrics/node" not in monitoring.scrape_map(cfg(), node=None)


def test_a_central_prometheus_scrapes_the_same_targets_through_the_gateway():
    files = monitoring.render(cfg(), "gpu-b", remote_url="http://10.0.0.7:8080")
    assert {k for k in files if k.startswith("remote/")} == {
        "remote/ernie-vllm@gpu-b.json", "remote/ernie-node@gpu-b.json",
        "remote/ernie-probes-health@gpu-b.json", "remote/ernie-probes-completion@gpu-b.json",
    }  # fmt: skip
    vllm = json.loads(files["remote/ernie-vllm@gpu-b.json"])
    assert vllm[1] == {
        "targets": ["10.0.0.7:8080"],
        "labels": {"host": "gpu-b", "port": "8001", "unit": "ernie-vllm@8001.service", "model": "ernie-x",
                   "__scheme__": "http", "__metrics_path__": "/metrics/8001"},
    }  # fmt: skip
    # the same labels as the host's own Prometheus gives them, so the same rules and panels hold
    local = json.loads(files["ernie-vllm.json"])
    assert [{k: v for k, v in e["labels"].items() if not k.startswith("__")} for e in vllm] == [e["labels"] for e in local]
    node = json.loads(files["remote/ernie-node@gpu-b.json"])
    assert node == [{"targets": ["10.0.0.7:8080"], "labels": {"host": "gpu-b", "__scheme__": "http", "__metrics_path__": "/metrics/node"}}]
    health = json.loads(files["remote/ernie-probes-health@gpu-b.json"])
    assert health == [{"targets": ["http://10.0.0.7:8080/health"], "labels": {"host": "gpu-b"}}]
    assert "remote/ernie-node@gpu-b.json" not in monitoring.render(cfg(), "gpu-b", node=None, remote_url="http://h")


def test_a_remote_url_that_is_no_gateway_url_is_refused(tmp_path, capsys):
    path = tmp_path / "ernie.yaml"
    path.write_text("instances: [{port: 9000}]\n")
    for bad in ("10.0.0.7:80", "http://10.0.0.7/v1", "ftp://h"):
        try:
            code = cli.main(["--config", str(path), "monitoring", "render", "--host", "h", "--remote-url", bad])
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2 and f"'{bad}' is not a gateway URL" in err, err
