"""The SCIM HR connector against a REAL SCIM 2.0 server process (scim2-server, tests/harness/scim_server.py),
seeded by each test through the server's own POST /Users. Only the time-out uses a STUB
(tests/harness/fault_server.py, 'hang': accepts, reads the request, never answers): a real server
cannot be made slow on demand."""

from __future__ import annotations

import socket
import uuid

import pytest

from ernie_ops.hr.model import Employee, HRError
from ernie_ops.hr.scim import ScimConnector
from tests.harness import scim_server
from tests.harness.dates import day
from tests.harness.fault_server import FaultServer

TOKEN = scim_server.TEST_TOKEN  # the package fixture `scim` serves with it


def start_date():  # still to come: accepted
    return day(5)


START_ATTR = f"{scim_server.HR_SCHEMA}:startDate"


@pytest.fixture
def server(scim):
    return scim  # the package's one scim2-server (tests/integration/conftest.py)


def _user(user_name: str, employee_number: str, department: str | None = "研发部", start: str | None = None) -> dict:
    return scim_server.user_record(user_name, employee_number, department=department, start=start or start_date().isoformat())


def _connector(base_url: str, token: str | None = TOKEN, **kw) -> ScimConnector:
    return ScimConnector(base_url, token, start_date_attribute=START_ATTR, **kw)


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_found_by_user_name(server):
    name, number = _unique("zhang.wei"), _unique("E")
    server.add_user(_user(name, number))
    server.add_user(_user(_unique("other"), _unique("E"), department="销售部"))
    with _connector(server.base_url) as hr:
        found = hr.find(user_name=name)
    assert found == Employee(name, number, "张伟", "研发部", "后端工程师", "li.na", start_date())


def test_found_by_employee_number(server):
    name, number = _unique("wang.fang"), _unique("E")
    later = day(33)
    server.add_user(_user(name, number, department="市场部", start=f"{later.isoformat()}T09:00:00+08:00"))
    with _connector(server.base_url) as hr:
        found = hr.find(employee_number=number)
    assert (found.user_name, found.employee_number, found.department, found.start_date) == (name, number, "市场部", later)


def test_unknown_user_is_not_found(server):
    with _connector(server.base_url) as hr, pytest.raises(HRError) as err:
        hr.find(user_name=_unique("nobody"))
    assert err.value.kind == "not_found"


def test_record_without_department_is_incomplete(server):
    name = _unique("no.dept")
    server.add_user(_user(name, _unique("E"), department=None))
    with _connector(server.base_url) as hr, pytest.raises(HRError) as err:
        hr.find(user_name=name)
    assert err.value.kind == "incomplete"
    assert "department" in err.value.detail


def test_start_date_in_unknown_format_is_bad_date(server):
    name = _unique("odd.date")
    server.add_user(_user(name, _unique("E"), start="next Monday"))
    with _connector(server.base_url) as hr, pytest.raises(HRError) as err:
        hr.find(user_name=name)
    assert err.value.kind == "bad_date"
    assert "next Monday" in err.value.detail


def test_a_start_date_in_the_past_is_a_record_like_any_other(server):
    """Whether onboarding still serves them is the window's business (onboarding/window.py), not the connector's."""
    name = _unique("late")
    server.add_user(_user(name, _unique("E"), start=day(-2).isoformat()))
    with _connector(server.base_url) as hr:
        assert hr.find(user_name=name).start_date == day(-2)


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_missing_or_wrong_token_is_unauthorized(server, token):
    with _connector(server.base_url, token=token) as hr, pytest.raises(HRError) as err:
        hr.find(user_name="anyone")
    assert err.value.kind == "unauthorized"
    assert TOKEN not in str(err.value)


def test_server_down_is_down():
    with socket.socket() as s:  # a port bound but not listening: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with _connector(f"http://127.0.0.1:{port}") as hr, pytest.raises(HRError) as err:
            hr.find(user_name="anyone")
    assert err.value.kind == "down"


def test_server_that_never_answers_is_timeout():
    stub = FaultServer(["hang"]).start()  # STUB: accepts and reads, never answers (see the module docstring)
    try:
        with _connector(stub.url, read_timeout=0.5) as hr, pytest.raises(HRError) as err:
            hr.find(user_name="anyone")
    finally:
        stub.stop()
    assert err.value.kind == "timeout"


def test_friendly_message_is_bilingual_and_hides_the_detail(server):
    with _connector(server.base_url) as hr, pytest.raises(HRError) as err:
        hr.find(user_name="ghost")
    assert "人事系统" in err.value.message and "HR" in err.value.message
    assert "ghost" not in err.value.message and "ghost" in err.value.detail
