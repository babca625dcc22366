"""Where the tests keep what outlives a run: downloads and builds (`CACHE`, never /tmp) and a run's
artifacts for a person to look at after a failure (`ARTIFACTS`: screenshots, playbook outputs)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(os.environ.get("ERNIE_OPS_TEST_CACHE", Path.home() / ".cache" / "ernie-ops"))
ARTIFACTS = Path(os.environ.get("ERNIE_OPS_ARTIFACTS", CACHE / "artifacts"))
