"""A real PostgreSQL server for the tests, from Debian's package (`postgresql`, in the Makefile's APT_PACKAGES):
its own cluster (initdb) in a private directory, 127.0.0.1 on a free port, the unix socket in that directory,
stopped by PID. Nothing of the package's own cluster (`main`, port 5432, /var/run/postgresql) is used or started.

The server refuses to run as root, and CI runs as root: as root, initdb and postgres run as the `postgres`
OS user the package creates (Popen's user/group), the directory handed to it; as anyone else they run as
that user. Durability is off (fsync, synchronous_commit, full_page_writes): a test cluster is thrown away.

Clients connect like production: over TCP as a role with a password (scram-sha-256 in pg_hba.conf for
host connections; the password holds characters a URL must escape), one fresh database per test
(`create_database`). The superuser is reached only through the unix socket (trust) to create those.

`stop()` / `start()` restart the same cluster on the same port: the fault tests' "database down".
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psutil

from tests.conftest import free_port

BIN_GLOB = "/usr/lib/postgresql/*/bin"
OS_USER = "postgres"
ROLE = "ernie"
# A test cluster: durability off, small memory, a log line per connection for a reader of postgres.log.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "40",
    "log_connections": "on",
    "log_line_prefix": "'%m [%p] %q%u@%d '",
    "timezone": "'Asia/Shanghai'",  # not UTC, as a server in China may run: times must not depend on it
}


def bin_dir() -> Path | None:
    """The newest installed major version's bin directory (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = [Path(d) for d in glob.glob(BIN_GLOB) if (Path(d) / "postgres").is_file() and (Path(d) / "initdb").is_file()]
    return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0) if found else None


def why_unavailable() -> str | None:
    if bin_dir() is None:
        return f"PostgreSQL is not installed: no initdb and postgres under {BIN_GLOB} (`make test` installs Debian's postgresql package)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            return f"as root, the server must run as the `{OS_USER}` OS user and there is none (Debian's postgresql package makes it)"
    return None


def _run_as() -> dict:
    """Popen arguments that drop root to the postgres user (the server refuses root); nothing otherwise."""
    return {"user": OS_USER, "group": OS_USER, "extra_groups": []} if os.geteuid() == 0 else {}


@dataclass
class Postgres:
    bin: Path
    work: Path  # owned by the server's user: data/, the socket, postgres.log
    port: int
    password: str
    database: str = "ernie_history"
    proc: subprocess.Popen | None = None
    start_seconds: list[float] = field(default_factory=list)  # each start(), initdb excluded
    _n: int = 0

    @property
    def data(self) -> Path:
        return self.work / "data"

    @property
    def log(self) -> Path:
        return self.work / "postgres.log"

    def url(self, database: str | None = None) -> str:
        """The password-authenticated TCP URL, as chat.env would hold it."""
        return f"postgresql+asyncpg://{ROLE}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{database or self.database}"

    def start(self) -> Postgres:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        began = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data)],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.work, start_new_session=True, **_run_as(),
            )  # fmt: skip
        self._wait_ready(began + 60)
        self.start_seconds.append(time.monotonic() - began)
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            # on the TCP address the clients use; rejects ("starting up") until recovery is done
            if subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"postgres did not accept connections on 127.0.0.1:{self.port} within 60 s:\n{self.output()[-3000:]}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions are ended, no checkpoint wait for clients), by PID."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGQUIT)  # immediate shutdown
            self.proc.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP the server and every backend (each runs in a session of its own, so not by process group):
        the kernel still accepts connections on the port, nothing answers; a hung server, a host gone silent."""
        main = psutil.Process(self.proc.pid)
        main.suspend()  # first: no new backend is forked after the children are listed
        for child in main.children(recursive=True):
            child.suspend()

    def thaw(self) -> None:
        main = psutil.Process(self.proc.pid)
        for child in main.children(recursive=True):
            child.resume()
        main.resume()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def psql(self, sql: str, database: str = "postgres") -> str:
        """SQL as the superuser over the unix socket (trust); raises with psql's output on an error."""
        argv = [str(self.bin / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(self.work), "-p", str(self.port),
                "-U", OS_USER, "-d", database, "-c", sql]  # fmt: skip
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.work, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database owned by the test role; its URL."""
        if name is None:
            self._n += 1
            name = f"t{self._n}_{secrets.token_hex(3)}"
        self.psql(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        return self.url(name)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _initdb(bindir: Path, work: Path, port: int) -> None:
    os.chmod(work, 0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam(OS_USER)
        os.chown(work, pw.pw_uid, pw.pw_gid)
    argv = [str(bindir / "initdb"), "-D", str(work / "data"), "-U", OS_USER, "-E", "UTF8", "--no-locale", "--no-sync",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--no-instructions"]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, cwd=work, timeout=120, **_run_as())
    if r.returncode != 0:
        raise RuntimeError(f"initdb failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    conf = {**SETTINGS, "port": str(port), "unix_socket_directories": f"'{work}'"}
    with open(work / "data" / "postgresql.conf", "a") as f:
        f.write("\n# tests/harness/postgres.py\n" + "".join(f"{k} = {v}\n" for k, v in conf.items()))


def start(work: Path | None = None) -> Postgres:
    """initdb + start + a password role and its database. `work`: an empty directory (default: a new one
    under /var/tmp, which the postgres user can reach; pytest's tmp dirs are private to root)."""
    reason = why_unavailable()
    if reason:
        raise RuntimeError(reason)
    bindir = bin_dir()
    work = work or Path(tempfile.mkdtemp(prefix="eo-pg-", dir="/var/tmp"))
    password = f"pw:{secrets.token_hex(8)}/@%"  # a URL must escape ':', '/', '@' and '%'
    port = free_port()  # kept across stop()/start(): the same URL before and after an outage
    _initdb(bindir, work, port)
    pg = Postgres(bindir, work, port, password).start()
    try:
        pg.psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'")
        pg.create_database(pg.database)
    except BaseException:
        pg.stop()
        raise
    return pg


def remove(pg: Postgres) -> None:
    pg.stop()
    shutil.rmtree(pg.work, ignore_errors=True)
