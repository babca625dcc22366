"""Debian's Chromium driven by Playwright (its Python package only: never `playwright install`).

A sandboxed host has its own network namespace (only `lo`), so the browser on this machine cannot
reach its nginx. Chromium is started *inside* that namespace by a wrapper executable,
`exec nsenter -t PID -n -- /usr/bin/chromium "$@"`: it keeps this machine's files, fonts and
/tmp, sees the host's 127.0.0.1:80, and Playwright still talks to it over the inherited pipes
(`--remote-debugging-pipe`), which a namespace switch does not touch. `exec` keeps one PID, so
Playwright's close/kill reaches Chromium itself. (A veth pair would need addresses and routes for
nothing more.) The wrapper lives in a private directory removed on exit.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.harness import budget

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def why_unavailable() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium; `make deps` does)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing (requirements/test.txt; `make deps` installs it)"
    return None


@contextlib.contextmanager
def chromium(netns_pid: int | None = None) -> Iterator:
    """A headless Chromium (in the network namespace of `netns_pid` when given); closed on exit."""
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="eo-chromium-", dir="/var/tmp"))
    executable = CHROMIUM
    if netns_pid is not None:
        wrapper = workdir / "chromium-in-netns"
        wrapper.write_text(f'#!/bin/sh\nexec nsenter -t {netns_pid} -n -- {CHROMIUM} "$@"\n')
        wrapper.chmod(0o755)
        executable = str(wrapper)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, headless=True, args=ARGS)
            budget.count("browsers")
            try:
                yield browser
            finally:
                browser.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
