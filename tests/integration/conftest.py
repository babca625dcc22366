"""Engines shared by the integration modules (each vLLM start costs 30-45 s on 2 cores, a real model's more):
- `served_gateway`: one tiny-model instance (the READY-gated launcher) behind the project's nginx, for the modules that
  only need a serving gateway (test_gateway, test_chat_backend, ...). Tests that change nginx's includes or the routed
  port put them back.
- `real_served`: the real instruct model, for test_real_model and test_cutover_quality.

Their tests run last in this package (the real model's, then the gateway's), so the engines stop (package scope)
before the next tier and never idle beside the modules that start their own engines."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port, write_config
from tests.harness import nginx, postgres, real_model, scim_server, serve_proc


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [i for i in items if Path(str(i.fspath)).is_relative_to(here)]
    first = items.index(mine[0]) if mine else 0
    if not mine or items[first : first + len(mine)] != mine:
        return  # not one contiguous run (e.g. a hand-picked order): leave it
    shared = [i for i in mine if "served_gateway" in getattr(i, "fixturenames", ())]
    # the modules of the real-model engine next to each other, just before: it idles between them otherwise
    real = [i for i in mine if i not in shared and "real_served" in getattr(i, "fixturenames", ())]
    items[first : first + len(mine)] = [i for i in mine if i not in shared and i not in real] + real + shared


@pytest.fixture(scope="package")
def scim() -> scim_server.ScimServer:
    """One real scim2-server for the HR and onboarding modules (each test seeds users with unique names)."""
    work = Path(tempfile.mkdtemp(prefix="eo-scim-", dir="/var/tmp"))
    srv = scim_server.start(work, free_port(), scim_server.TEST_TOKEN)
    yield srv
    srv.stop()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="package")
def postgres_server() -> postgres.Postgres:
    """One real PostgreSQL (Debian's package, own cluster, ~0.6 s with initdb) for the integration tier; each
    test takes a fresh database from it (`postgres_url`). A module using it marks itself with
    `tiers.unavailable(postgres.why_unavailable())`, so a machine without PostgreSQL fails under CI at setup."""
    pg = postgres.start()
    yield pg
    postgres.remove(pg)


@pytest.fixture
def postgres_url(postgres_server: postgres.Postgres) -> str:
    """A fresh empty database on the shared server: the password-authenticated TCP URL (postgresql+asyncpg)."""
    if not postgres_server.running:  # a fault test that failed half-way: the next test gets a server again
        postgres_server.start()
    return postgres_server.create_database()


@dataclass
class RealServed:
    sp: serve_proc.ServeProcess
    ready_seconds: float  # from starting the launcher to READY=1
    config: Path  # the ernie.yaml it was started from

    @property
    def port(self) -> int:
        return self.sp.port


@pytest.fixture(scope="package")
def real_served() -> RealServed:
    """The real instruct model (tests/harness/real_model.py) served once for the package: test_real_model asks it,
    test_cutover_quality cuts over to it (a real-model start is the dearest engine start of the tier)."""
    work = Path(tempfile.mkdtemp(prefix="eo-real-", dir="/var/tmp"))
    port = free_port()
    # float32: on this CPU (AVX512-BF16, no AMX) `--dtype auto` serves the config's bf16, which changed 3 of 6
    # short greedy answers against transformers and decoded at 11-25 tokens/s; float32 matched 6 of 6 at 23-28.
    model = {"served_name": real_model.SERVED_NAME}
    cfg = write_config(work / "ernie.yaml", real_model.cached(), [port], work / "cache", model=model, vllm={"dtype": "float32"})
    started = time.monotonic()
    sp = serve_proc.start(cfg, port, work)
    try:
        ready_at = sp.wait_ready()
        yield RealServed(sp, ready_at - started, cfg)
    finally:
        sp.stop()
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class ServedGateway:
    sp: serve_proc.ServeProcess
    ng: nginx.Nginx
    port: int  # the vLLM instance's port, routed by ng


@pytest.fixture(scope="package")
def served_gateway(tiny_model_dir) -> ServedGateway:
    work = Path(tempfile.mkdtemp(prefix="eo-gw-", dir="/var/tmp"))
    work.chmod(0o755)  # nginx's workers (user nobody) buffer request bodies > 16 KB to files under it
    port = free_port()
    sp = serve_proc.start(write_config(work / "ernie.yaml", tiny_model_dir, [port], work / "cache"), port, work)
    ng = None
    try:
        sp.wait_ready()
        ng = nginx.prepare(work / "nginx", free_port(), port).start()
        yield ServedGateway(sp, ng, port)
    finally:
        if ng:
            ng.stop()
        sp.stop()
        shutil.rmtree(work, ignore_errors=True)
