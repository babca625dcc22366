"""The base every section of the config file derives from, shared by the root schema (`config`) and the
feature sections (`docs.config`, `copy.config`, `hr.config`, `onboarding.config`, `chat.config`).
It imports no ernie_ops module, so a feature's section can use it without importing the root config."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def first_duplicate(values: list) -> Any:
    """The smallest value listed more than once (a stable choice for the error message), or None."""
    dupes = sorted({v for v in values if values.count(v) > 1})
    return dupes[0] if dupes else None


class Section(BaseModel):
    # strict: YAML already gives real types, so "8000" (a string) for a port is a mistake to report.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
