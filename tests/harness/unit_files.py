"""Reading the project's systemd unit files: their directives, and the hardening score
`systemd-analyze security --offline` gives them (shared by the engine's and the chat app's unit checks).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"


def directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def exposure(unit: Path) -> float:
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True, text=True)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert match, r.stdout + r.stderr
    return float(match.group(1))
