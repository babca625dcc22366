"""SCIM 2.0 HR connector (RFC 7643/7644) over httpx: one `GET /Users?filter=...` per lookup.

userName is a core attribute; employeeNumber, department and manager live in the enterprise extension;
title is the core attribute. SCIM has no standard start date, so its attribute path is configurable
(e.g. `urn:example:hr:2.0:User:startDate` in an extension, or a dotted core path). The bearer
token is passed in by the caller (from the EnvironmentFile), never read from the YAML config.
Every failure becomes an HRError whose kind the chat app shows as one friendly sentence.
"""

from __future__ import annotations

import httpx

from ernie_ops.hr.model import Employee, HRError, checked

CORE = "urn:ietf:params:scim:schemas:core:2.0:User"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"


def attribute(resource: dict, path: str) -> object:
    """The value at a SCIM attribute path: `name.sub`, or `urn:...:Schema:name.sub` for an extension."""
    if path.startswith("urn:"):
        schema, _, name = path.rpartition(":")
        node: object = resource.get(schema) or resource.get(schema.lower()) or {}
    else:
        if path.startswith(CORE + ":"):
            path = path[len(CORE) + 1 :]
        node, name = resource, path
    for part in name.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ScimConnector:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        start_date_attribute: str,
        connect_timeout: float = 3.0,
        read_timeout: float = 10.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.start_date_attribute = start_date_attribute
        headers = {"Accept": "application/scim+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._client = httpx.Client(headers=headers, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ScimConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def find(self, *, user_name: str | None = None, employee_number: str | None = None) -> Employee:
        if bool(user_name) == bool(employee_number):
            raise ValueError("find() takes exactly one of user_name, employee_number")
        if user_name:
            label, wanted, path = "userName", user_name, "userName"
        else:
            label, wanted, path = "employeeNumber", employee_number, f"{ENTERPRISE}:employeeNumber"
        resources = self._search(f"{path} eq {_quoted(wanted)}", f"{label} {wanted!r}")
        if not resources:
            raise HRError("not_found", f"{self.base_url}/Users: no user with {label} {wanted!r}")
        if len(resources) > 1:
            raise HRError("not_found", f"{self.base_url}/Users: {len(resources)} users with {label} {wanted!r}, expected one")
        user = resources[0]
        manager = attribute(user, f"{ENTERPRISE}:manager")
        if isinstance(manager, dict):
            manager = manager.get("displayName") or manager.get("value")
        return checked(
            f"{self.base_url}/Users {label} {wanted!r}",
            user_name=str(user.get("userName") or ""),
            employee_number=str(attribute(user, f"{ENTERPRISE}:employeeNumber") or ""),
            display_name=str(user.get("displayName") or attribute(user, "name.formatted") or ""),
            department=attribute(user, f"{ENTERPRISE}:department"),
            title=user.get("title"),
            manager=manager,
            start_date=attribute(user, self.start_date_attribute),
        )

    def _search(self, filter_: str, what: str) -> list[dict]:
        url = f"{self.base_url}/Users"
        try:
            response = self._client.get(url, params={"filter": filter_})
        except httpx.TimeoutException as exc:
            raise HRError("timeout", f"{url}: no answer in time looking up {what} ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise HRError("down", f"{url}: cannot connect ({type(exc).__name__}: {exc})") from None
        if response.status_code in (401, 403):
            raise HRError("unauthorized", f"{url}: HTTP {response.status_code}; check the SCIM bearer token in the EnvironmentFile")
        if response.status_code == 404:
            raise HRError("down", f"{url}: HTTP 404; is the SCIM base URL right (it ends before /Users)?")
        if response.status_code >= 400:
            raise HRError("down", f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            body = response.json()
        except ValueError:
            raise HRError("down", f"{url}: the answer is not JSON: {response.text[:200]!r}") from None
        resources = body.get("Resources") if isinstance(body, dict) else None
        if resources is None and isinstance(body, dict) and body.get("totalResults") == 0:
            return []
        if not isinstance(resources, list):
            raise HRError("down", f"{url}: not a SCIM ListResponse: {response.text[:200]!r}")
        return [r for r in resources if isinstance(r, dict)]
