"""The `chat.onboarding.hr` section of the config file: where the onboarding helper reads who a new
employee is (an HR export file or a SCIM server)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ernie_ops.config_section import Section


class HRConfig(Section):
    """Where the onboarding helper reads who a new employee is. The SCIM bearer token is NOT here: it is read
    from the environment variable `token_env` (the chat unit's EnvironmentFile, /etc/ernie-ops/chat.env)."""

    source: Literal["file", "scim"] = Field("file", description="file: an HR export (CSV/YAML); scim: a SCIM 2.0 server")
    file: str = Field("/etc/ernie-ops/hr-export.csv", min_length=1, description="the export file (source: file), re-read at each lookup")
    url: str | None = Field(None, pattern=r"^https?://", description="SCIM base URL, the part before /Users (source: scim)")
    token_env: str = Field("ERNIE_OPS_HR_TOKEN", pattern=r"^[A-Z_][A-Z0-9_]*$", description="environment variable holding the bearer token")
    lookup: Literal["userName", "employeeNumber"] = Field("userName", description="which SCIM attribute the chat login name is")
    start_date_attribute: str = Field(
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:startDate",
        min_length=1,
        description="SCIM has no standard start date: the attribute path your HR system uses",
    )
    connect_timeout_seconds: float = Field(3.0, gt=0.0, le=120.0)
    read_timeout_seconds: float = Field(10.0, gt=0.0, le=600.0)

    @model_validator(mode="after")
    def _url_for_scim(self) -> HRConfig:
        if self.source == "scim" and not self.url:
            raise ValueError("source scim needs `url`, the SCIM base URL (e.g. https://hr.example.com/scim/v2)")
        return self
