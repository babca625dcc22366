"""Real nginx on a private prefix, running the project's nginx/ernie-ops.conf unchanged.

Layout under PREFIX: conf/nginx.conf (a test main config that includes the project's site file by
absolute path), conf/ernie-ops/* (the small per-host includes, copied from nginx/ernie-ops/ and
then adjusted: listen port, upstream), logs/, temp/. Started in the foreground, stopped by PID.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from ernie_ops import config
from ernie_ops.traffic import gateway
from tests.conftest import free_port
from tests.harness.fault_server import FaultServer
from tests.harness.wait import until

PROJECT = Path(__file__).resolve().parents[2]
NGINX = "/usr/sbin/nginx"
JS_MODULE = "/usr/lib/nginx/modules/ngx_http_js_module.so"  # libnginx-mod-http-js: the API's session key (njs)

MAIN_CONF = """\
load_module {js_module};
daemon off;
worker_processes 2;
pid logs/nginx.pid;
error_log logs/error.log notice;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path temp/client;
    proxy_temp_path temp/proxy;
    fastcgi_temp_path temp/fastcgi;
    uwsgi_temp_path temp/uwsgi;
    scgi_temp_path temp/scgi;
    access_log logs/access.log;
    include {site};
}}
"""


@dataclass
class Nginx:
    prefix: Path
    port: int
    proc: subprocess.Popen | None = None
    scheme: str = "http"  # "https" when server.conf listens with `ssl`
    edge_port: int = 0  # the edges' listener (keep-alive on, for trusted edges: loopback here)

    @property
    def args(self) -> list[str]:
        return ["-p", f"{self.prefix}/", "-c", "conf/nginx.conf", "-e", "logs/error.log"]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def upstream_file(self) -> Path:
        return self.prefix / "conf" / "ernie-ops" / "upstream.conf"

    @property
    def pid_file(self) -> Path:
        return self.prefix / "logs" / "nginx.pid"  # MAIN_CONF's `pid`

    def gateway_config(self) -> dict:
        """The `gateway:` section of an ernie-ops config that drives this nginx."""
        return {
            "url": self.url,
            "upstream_file": str(self.upstream_file),
            "nginx_binary": NGINX,
            "nginx_args": self.args,
            "access_log": str(self.access_log),
        }

    @property
    def access_log(self) -> Path:
        return self.prefix / "logs" / "ernie-ops.access.log"

    def start(self) -> Nginx:
        self.proc = subprocess.Popen([NGINX, *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/healthz", timeout=1, verify=False)  # readiness only: any certificate
                return self
            except httpx.HTTPError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"nginx did not start: {(self.prefix / 'logs' / 'error.log').read_text()[-2000:]}")

    def reload(self) -> None:
        """`nginx -s reload`, returning once only the new configuration's workers take connections."""
        with self.reloading():
            subprocess.run([NGINX, *self.args, "-s", "reload"], check=True, capture_output=True, timeout=30)

    def serving_workers(self) -> set[int]:
        """PIDs of the workers that take new connections: a worker a reload tells to quit retitles itself
        "worker process is shutting down" as it closes its listeners, so these are the current configuration's."""
        return {pid for pid, title in workers_of(self.proc.pid) if title == "nginx: worker process"}

    @contextlib.contextmanager
    def reloading(self, timeout: float = 30) -> Iterator[None]:
        """The block reloads this nginx (`ernie-ops`'s Gateway or `nginx -s reload`); leaving it waits until every
        worker taking connections is a new one. Right after `nginx -s reload` returns, an old worker (the previous
        configuration) can still take a connection: a fixed sleep hoped the master had swapped them by then."""
        before = self.serving_workers()
        yield

        def swapped() -> bool:
            now = self.serving_workers()
            return bool(now) and not now & before

        try:
            until("nginx's workers of the new configuration", swapped, timeout=timeout, every=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: workers {sorted(self.serving_workers())}, before {sorted(before)}; "
                                 f"error log: {self.error_log()[-1000:]}") from None  # fmt: skip

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def error_log(self) -> str:
        return (self.prefix / "logs" / "error.log").read_text(errors="replace")

    def gateway(self, **kw) -> gateway.Gateway:
        """`ernie-ops`'s own driver of this nginx (`traffic/gateway.py`)."""
        return gateway.Gateway(config.GatewayConfig(**self.gateway_config()), **kw)

    @contextlib.contextmanager
    def include_replaced(self, name: str, text: str) -> Iterator[None]:
        """One of the small includes rewritten and loaded as `ernie-ops` loads it (validated, then reloaded); the
        original is back (and loaded) afterwards."""
        path = self.prefix / "conf" / "ernie-ops" / name
        original = path.read_text()
        gw = self.gateway()
        try:
            path.write_text(text)
            with self.reloading():
                gw.apply()
            yield
        finally:
            path.write_text(original)
            with self.reloading():
                gw.reload()

    @contextlib.contextmanager
    def pool_silent_after_one_event(self) -> Iterator[FaultServer]:
        """The pool replaced by a STUB replica (tests/harness/fault_server.py `stall`) that answers an SSE head and one
        event, then sends nothing for 30 s: whether a hop relays an event as it comes is then a wait for that event,
        not a count of arrival times. vLLM cannot be made to pause on demand; timed against it, its API server on 2
        busy cores sent 300 tokens in 2 bursts, held engine or not (a CI run), which said nothing of nginx."""
        stub = FaultServer(["stall"]).start()
        try:
            with self.include_replaced("upstream.conf", gateway.render_pool([stub.port])):
                yield stub
        finally:
            stub.stop()


def workers_of(master: int) -> list[tuple[int, str]]:
    """The master's children as (PID, process title); one that exits meanwhile is left out."""
    found = []
    for child in psutil.Process(master).children():
        try:
            found.append((child.pid, " ".join(child.cmdline()).strip()))  # nginx pads its title with NULs
        except psutil.NoSuchProcess:
            continue
    return found


def first_event(client: httpx.Client, url: str, stub: FaultServer, body: dict) -> bytes | None:
    """What `client` reads first of a stream that `stub` (pool_silent_after_one_event) answers with one event and then
    nothing; None when nothing came within the client's read timeout (a hop on the way buffered it)."""
    try:
        with client.stream("POST", url, json=body) as r:
            assert r.status_code == 200 and r.headers["x-ernie-upstream"].endswith(f"127.0.0.1:{stub.port}"), r.headers
            return next(r.iter_raw())
    except httpx.ReadTimeout:
        return None


def prepare(
    prefix: Path,
    port: int,
    upstream_port: int,
    chat_port: int = 1,
    metrics_allow: str | None = None,
    api_keys: list[str] | None = None,
    client_keepalive: bool = False,
) -> Nginx:
    """Lay out a prefix; `api_keys` turns on bearer auth for /v1/; `client_keepalive` runs the site file with
    nginx's default keep-alive (65 s) instead of the shipped `keepalive_timeout 0` (benchmarks compare both)."""
    conf = prefix / "conf"
    (conf / "ernie-ops").mkdir(parents=True, exist_ok=True)
    for d in ("logs", "temp"):
        (prefix / d).mkdir(exist_ok=True)
    for f in (PROJECT / "nginx" / "ernie-ops").iterdir():
        shutil.copy(f, conf / "ernie-ops" / f.name)
    site = PROJECT / "nginx" / "ernie-ops.conf"
    if client_keepalive:
        (conf / "site-keepalive.conf").write_text(site.read_text().replace("keepalive_timeout 0;", "keepalive_timeout 65;"))
        site = conf / "site-keepalive.conf"
    (conf / "nginx.conf").write_text(MAIN_CONF.format(site=site, js_module=JS_MODULE))
    (conf / "ernie-ops" / "server.conf").write_text(f"listen 127.0.0.1:{port};\naccess_log logs/ernie-ops.access.log ernie_ops;\n")
    edge_port = free_port()
    (conf / "ernie-ops" / "edge-listen.conf").write_text(
        f"listen 127.0.0.1:{edge_port};\naccess_log logs/ernie-ops.access.log ernie_ops;\n"
    )
    upstream = f"server 127.0.0.1:{upstream_port} max_fails=0;\n"
    (conf / "ernie-ops" / "upstream.conf").write_text(upstream)
    (conf / "ernie-ops" / gateway.KEYED_NAME).write_text(gateway.render_keyed(upstream))  # what route --init writes beside it
    (conf / "ernie-ops" / "chat-upstream.conf").write_text(f"server 127.0.0.1:{chat_port};\n")
    if api_keys:  # what the role's api-keys.map.j2 writes
        (conf / "ernie-ops" / "api-keys.map").write_text("default 1;\n" + "".join(f'"Bearer {k}" 0;\n' for k in api_keys))
    if metrics_allow is not None:
        (conf / "ernie-ops" / "metrics-allow.conf").write_text(metrics_allow)
    return Nginx(prefix=prefix, port=port, edge_port=edge_port)


@dataclass(frozen=True)
class Tls:
    """A certificate chain for a test server: `cert` (leaf + CA), `key`, and `ca`, what a client trusts."""

    cert: Path
    key: Path
    ca: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def test_ca(work: Path) -> tuple[Path, Path]:
    """A private CA (ECDSA P-256): its certificate and key."""
    work.mkdir(parents=True, exist_ok=True)
    cert, key = work / "ca.pem", work / "ca.key"
    if not cert.exists():
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                 "-subj", "/CN=ernie-ops test CA", "-keyout", str(key), "-out", str(cert))  # fmt: skip
    return cert, key


def issue(work: Path, stem: str = "server", names: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost")) -> Tls:
    """A server certificate from the test CA of `work` (a new key each time: a renewal that rotates the key)."""
    ca_cert, ca_key = test_ca(work)
    key, csr, leaf, chain = (work / f"{stem}.{ext}" for ext in ("key", "csr", "leaf.pem", "pem"))
    ext = work / f"{stem}.ext"
    ext.write_text(f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={stem}",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "2", "-extfile", str(ext), "-out", str(leaf))  # fmt: skip
    chain.write_text(leaf.read_text() + ca_cert.read_text())
    return Tls(cert=chain, key=key, ca=ca_cert)


@dataclass
class Edge(Nginx):
    """nginx/ernie-edge.conf on a private prefix: HTTPS on `port`, plain HTTP on `http_port`."""

    http_port: int = 0
    ca: Path | None = None  # what a client verifies the certificate with

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def drain_flag(self) -> Path:
        return self.prefix / "run" / "edge-draining"

    @property
    def upstream_file(self) -> Path:
        return self.prefix / "conf" / "ernie-edge" / "upstream.conf"

    @property
    def access_log(self) -> Path:
        return self.prefix / "logs" / "ernie-edge.access.log"


def prepare_edge(prefix: Path, backends: list[str], tls: Tls, http2: bool = True) -> Edge:
    """Lay out a prefix for the edge site file in front of `backends` ("127.0.0.1:PORT" gateways)."""
    conf = prefix / "conf"
    (conf / "ernie-edge").mkdir(parents=True, exist_ok=True)
    for d in ("logs", "temp", "run"):
        (prefix / d).mkdir(exist_ok=True)
    for f in (PROJECT / "nginx" / "ernie-edge").iterdir():
        shutil.copy(f, conf / "ernie-edge" / f.name)
    shutil.copy(PROJECT / "nginx" / "ernie-ops" / "session_key.js", conf / "ernie-edge")  # the gateway's, as the role does
    edge = Edge(prefix=prefix, port=free_port(), scheme="https", http_port=free_port(), ca=tls.ca)
    (conf / "nginx.conf").write_text(MAIN_CONF.format(site=PROJECT / "nginx" / "ernie-edge.conf", js_module=JS_MODULE))
    log = "access_log logs/ernie-edge.access.log ernie_edge;\n"
    (conf / "ernie-edge" / "tls.conf").write_text(
        f"listen 127.0.0.1:{edge.port} ssl{' http2' if http2 else ''};\nssl_certificate {tls.cert};\nssl_certificate_key {tls.key};\n{log}"
    )
    (conf / "ernie-edge" / "http.conf").write_text(f"listen 127.0.0.1:{edge.http_port};\n{log}")
    (conf / "ernie-edge" / "redirect.conf").write_text(f"return 301 https://$host:{edge.port}$request_uri;\n")
    shipped = (PROJECT / "nginx" / "ernie-edge" / "upstream.conf").read_text().splitlines(keepends=True)
    servers = "".join(f"server {b};\n" for b in backends)  # the gateways' edge listeners; the shipped keep-alive
    (conf / "ernie-edge" / "upstream.conf").write_text(servers + "".join(line for line in shipped if not line.startswith("server ")))
    drain = f"if (-f {edge.drain_flag}) {{\n    set $ernie_edge_connection $ernie_edge_close;\n}}\n"
    (conf / "ernie-edge" / "drain.conf").write_text(drain)
    return edge
