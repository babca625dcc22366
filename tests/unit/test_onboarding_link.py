"""The onboarding card's link (chat_app/elements/OnboardingItem.jsx) is a link only to http(s) or the site's own paths.

A card's props come back from the history database on a resumed thread; an attacker who rewrote one there (issue 34)
would put a javascript: url in it. The element's own `safeUrl` line runs here in node (Playwright's, which the test
venv installs) against the urls an attacker would try; the Python side, `onboarding.service.card`, only ever makes
http(s) links from a guide.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import playwright
import pytest

from ernie_ops.onboarding.pushlog import Item
from ernie_ops.onboarding.service import card

JSX = Path(__file__).resolve().parents[2] / "ernie_ops" / "chat_app" / "elements" / "OnboardingItem.jsx"
NODE = Path(playwright.__file__).parent / "driver" / "node"

ATTACKS = [
    "javascript:alert(document.cookie)",
    "  JaVaScRiPt:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "\x01javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:msgbox(1)",
    "//evil.example/login",
    "/\\evil.example/login",
    "https:evil.example",
    "file:///etc/passwd",
    "",
    None,
    ["https://a.example"],
]
ALLOWED = ["https://wiki.example.com/vpn?x=1#setup", "http://intranet/guide", "/docs/handbook", "HTTPS://WIKI.EXAMPLE/"]


def safe_url_in_node(urls: list) -> list:
    line = next(x for x in JSX.read_text().splitlines() if x.startswith("const safeUrl = "))
    script = f"{line}\nconsole.log(JSON.stringify({json.dumps(urls)}.map(safeUrl)))"
    r = subprocess.run([str(NODE), "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_card_links_only_to_http_and_its_own_paths():
    assert safe_url_in_node(ATTACKS) == [None] * len(ATTACKS)
    assert safe_url_in_node(ALLOWED) == [u.strip() for u in ALLOWED]


def test_the_element_renders_a_refused_url_as_text_not_a_link():
    text = JSX.read_text()
    assert "href={safeUrl(props.url)}" in text and "href={props.url}" not in text


@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,x", "//evil.example/x"])
def test_a_guide_whose_last_line_is_not_http_gets_no_link(url):
    item = Item(employee="E1001", item_id="g1", kind="guide", content=f"VPN\nInstall the client.\n{url}", pushed_at="t", confirmed_at=None)
    props = card(item)
    assert props["url"] is None and url in props["body"], props
