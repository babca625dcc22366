"""Every failed UI test leaves what a person needs to see why: a screenshot of the page, the page's HTML, the chat
app's journal and the websocket frames the page last received, under $ERNIE_OPS_ARTIFACTS/ui/failed/<test>/."""

from __future__ import annotations

import re

import pytest

from tests.harness.kept import keep_failure
from tests.harness.paths import ARTIFACTS

FAILED = ARTIFACTS / "ui" / "failed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and report.when in ("setup", "call"):
        where = FAILED / re.sub(r"[^\w.-]+", "_", item.name)
        try:
            sb = item.funcargs.get("sb")
            saved = keep_failure(item.funcargs.get("chat"), {"host": sb} if sb is not None else {}, where)
        except Exception as exc:  # the test's own failure is what the report shows; this only adds to it
            saved = [f"(could not keep the page and journal: {exc})"]
        if saved:
            report.sections.append(("kept for this failure", "\n".join(str(p) for p in saved)))
    return report
