"""The edge's pieces agree with each other: the unit, its nginx main config, the draining reload, the role's fixed
paths and the site file's includes (one fact each, stated once and checked here where it must be repeated)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ernie_ops.traffic import edge_reload
from tests.harness import role_tasks

ROOT = Path(__file__).resolve().parents[2]
UNIT = (ROOT / "systemd" / "ernie-edge.service").read_text()
MAIN = (ROOT / "nginx" / "ernie-edge-nginx.conf").read_text()
SITE = (ROOT / "nginx" / "ernie-edge.conf").read_text()
ROLE = ROOT / "ansible" / "roles" / "ernie_edge"
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def directive(text: str, key: str) -> str:
    return re.search(rf"^{key}=(.*)$", text, re.M).group(1)


def test_the_unit_runs_the_main_config_the_role_installs_and_watches_its_pid_file():
    conf = f"{ROLE_VARS['ernie_edge_conf_dir']}/nginx.conf"
    assert directive(UNIT, "ExecStart") == f"/usr/sbin/nginx -c {conf}"
    pid = re.search(r"^pid (\S+);", MAIN, re.M).group(1)
    assert directive(UNIT, "PIDFile") == pid


def test_reloading_the_unit_is_the_draining_reload_with_the_role_s_script_and_flag():
    reload = directive(UNIT, "ExecReload").split()
    assert reload[:2] == ["/usr/bin/python3", ROLE_VARS["ernie_edge_reload_script"]]
    assert reload[reload.index("--pid-file") + 1] == directive(UNIT, "PIDFile")
    assert reload[reload.index("--") + 1 :] == ["-c", f"{ROLE_VARS['ernie_edge_conf_dir']}/nginx.conf"]
    assert "--flag" not in reload and ROLE_VARS["ernie_edge_drain_flag"] == edge_reload.DEFAULT_FLAG
    assert f"if (-f {edge_reload.DEFAULT_FLAG})" in (ROOT / "nginx" / "ernie-edge" / "drain.conf").read_text()
    # the reload's drain and the workers' retirement fit in the unit's reload timeout
    drain = edge_reload.drain_seconds(SITE) + edge_reload.MARGIN_SECONDS + edge_reload.WORKERS_TIMEOUT_SECONDS
    assert drain < int(directive(UNIT, "TimeoutStartSec"))


def test_every_include_of_the_site_has_a_default_file_and_a_role_template():
    included = set(re.findall(r"include ernie-edge/([\w.-]+);", SITE))
    assert included == {"tls.conf", "http.conf", "redirect.conf", "upstream.conf", "drain.conf", "chat-upload.conf", "internal-readers.geo"}
    assert included == {p.name for p in (ROOT / "nginx" / "ernie-edge").iterdir()}
    assert included == {p.name.removesuffix(".j2") for p in (ROLE / "templates").iterdir()}
    assert "include ernie-edge.conf;" in MAIN


def test_the_edge_ends_an_idle_gateway_connection_before_the_gateway_does():
    # in every upstream block of the edge's site (plain, sticky, keyed), the same (the include the role writes holds
    # only the servers)
    blocks = re.findall(r"upstream \w+ \{([^{}]*)\}", SITE)
    idles = {m for block in blocks for m in re.findall(r"keepalive_timeout (\S+);", block)}
    assert len(blocks) == 3 and len(idles) == 1 and all("keepalive 16;" in block for block in blocks), blocks
    for upstream in (ROOT / "nginx" / "ernie-edge" / "upstream.conf", ROLE / "templates" / "upstream.conf.j2"):
        assert "keepalive" not in upstream.read_text(), upstream
    edge_idle = edge_reload.nginx_seconds(idles.pop())
    gateway = (ROOT / "nginx" / "ernie-ops.conf").read_text()
    listener = gateway[gateway.index("include ernie-ops/edge-listen.conf;") :]
    gateway_idle = edge_reload.nginx_seconds(re.search(r"keepalive_timeout (\S+);", listener).group(1))
    assert 0 < edge_idle < gateway_idle


def test_the_edge_takes_the_bodies_the_gateway_takes_and_buffers_them_to_resend():
    limit = re.compile(r"client_max_body_size (\S+);")
    gateway = limit.findall((ROOT / "nginx" / "ernie-ops" / "locations.conf").read_text())
    assert limit.findall(SITE) == gateway and len(gateway) == 1
    assert "proxy_request_buffering off" not in SITE  # nginx resends only a buffered body


def test_hsts_is_a_year_with_a_real_certificate_and_off_with_a_self_signed_one(tmp_path):
    """The edge's Strict-Transport-Security default, as the role resolves it (issue 34, item 7): a browser that has
    met the edge never tries it over plain HTTP again; a lab's self-signed certificate gets none (HSTS would leave a
    browser no way past its warning). Run by ansible-playbook on local hosts, the role's preflight then its value."""
    hosts = {
        "vault": {"ernie_edge_tls_certificate": "-----BEGIN CERTIFICATE-----", "ernie_edge_tls_private_key": "-----BEGIN PRIVATE KEY-----"},
        "lab": {"ernie_edge_tls_self_signed": True},
        "chosen": {"ernie_edge_tls_self_signed": True, "ernie_edge_hsts_max_age": 600},
    }
    show = [{"ansible.builtin.debug": {"msg": "hsts={{ ernie_edge_hsts_max_age }}"}}]
    run = role_tasks.run(
        tmp_path, "ernie_edge", ["preflight"], hosts, after=show, ernie_edge_enabled=True, ernie_edge_backends=["10.0.0.5:8081"]
    )
    assert run.rc == 0, run.output[-4000:]
    seen = dict(re.findall(r'ok: \[(\w+)\] => \{\s*"msg": "hsts=(\d+)"', run.output))
    assert seen == {"vault": "31536000", "lab": "0", "chosen": "600"}, run.output[-3000:]
