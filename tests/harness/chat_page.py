"""The Chainlit chat page as a person uses it, through Playwright: log in, send, watch a reply stream, stop.

Readiness: Chainlit shows its input before the websocket session exists, and an Enter pressed then is
dropped (seen: the message stayed in the box). The page is ready once the server has run
`on_chat_start` for this socket, i.e. a `task_end` frame arrived after its `on_chat_start` step.
Times: `send()` records, in the page, when Enter went down, when the reply's first text appeared and
every length the reply's text had (a MutationObserver): what a person sees, not a polling interval.

A profile switch may connect twice (see `choose_profile`): the page records, from before its own scripts
run, when it opened each websocket and what each received of a session's start (`_SOCKETS`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

ASSISTANT = '[data-step-type="assistant_message"]'
ASK_FRAME = re.compile(r'42\d*\["ask"')  # socket.io: the event, with the ack id the app waits on (421["ask",...])
SETTLE_MS = 1000  # a profile switch is over when no new socket opened for this long (see choose_profile)
USER = '[data-step-type="user_message"]'

_WATCH = """
(n0) => {
  const w = {t0: null, first: null, lengths: []};
  window.__eo = w;
  document.addEventListener('keydown', e => { if (e.key === 'Enter' && w.t0 === null) w.t0 = performance.now(); },
                            {capture: true});
  const seen = () => {
    const msgs = document.querySelectorAll('[data-step-type="assistant_message"]');
    if (msgs.length <= n0) return;
    const n = msgs[msgs.length - 1].innerText.trim().length;
    if (n > 0 && (w.lengths.length === 0 || w.lengths[w.lengths.length - 1] !== n)) {
      if (w.first === null) w.first = performance.now();
      w.lengths.push(n);
    }
  };
  new MutationObserver(seen).observe(document.body, {childList: true, subtree: true, characterData: true});
}
"""


# Before the page's scripts (socket.io takes window.WebSocket when it loads): each websocket's opening time
# (performance.now()), when it last received a frame, and, of what it received, the on_chat_start step's frames,
# task_start and task_end.
# Every Content-Security-Policy violation the page reports (the gateway's policy: nginx/ernie-ops/locations.conf).
_CSP = r"""
(() => {
  const seen = window.__eoCsp = [];
  document.addEventListener('securitypolicyviolation', e => seen.push({directive: e.effectiveDirective, blocked: e.blockedURI}));
})();
"""

_SOCKETS = r"""
(() => {
  const Native = window.WebSocket;
  const sockets = window.__eoSockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      const rec = {at: performance.now(), last: performance.now(), events: []};
      sockets.push(rec);
      this.addEventListener('message', e => {
        rec.last = performance.now();
        const d = typeof e.data === 'string' ? e.data : '';
        if (d.startsWith('42["task_end"')) rec.events.push('task_end');
        else if (d.startsWith('42["task_start"')) rec.events.push('task_start');
        else if (d.includes('"name":"on_chat_start"')) rec.events.push('on_chat_start');
        else if (/^42\d*\["ask"/.test(d)) rec.events.push('ask');  // an emit with an ack id: 421["ask",...]
      });
    }
  };
})();
"""

# Before a profile switch: the chat input there now is the old one; note when a new one is mounted.
_SWITCHING = """
() => {
  const old = document.querySelector('#chat-input');
  if (old) old.__eoOld = true;
  const w = window.__eoSwitch = {at: performance.now(), mounted: null};
  const seen = () => {
    const el = document.querySelector('#chat-input');
    if (el && !el.__eoOld && w.mounted === null) { w.mounted = performance.now(); observer.disconnect(); }
  };
  const observer = new MutationObserver(seen);
  observer.observe(document.body, {childList: true, subtree: true});
}
"""

# The switch is done: the chat was mounted again (the new profile's settings loaded), a websocket opened after
# that (the page's last one), that socket's last task frame is task_end (its connection_successful, or the end of an
# on_chat_start that ran on it), and the session's on_chat_start is over: its step's frames then task_end were seen
# since the switch, on whichever socket, or the last socket has been quiet for `quiet` ms. The second case is real:
# when the first socket closes while on_chat_start runs on the server, the frames it emits before the second socket
# has restored the session go to the closed one and no socket ever shows them (CI: 60 s waiting for them).
_SWITCHED = """
(quiet) => {
  const w = window.__eoSwitch;
  if (!w || w.mounted === null) return false;
  const since = window.__eoSockets.filter(s => s.at >= w.at);
  const last = since[since.length - 1];
  if (!last || last.at <= w.mounted) return false;
  const tasks = last.events.filter(e => e === 'task_start' || e === 'task_end');
  if (tasks[tasks.length - 1] !== 'task_end') return false;
  const events = since.flatMap(s => s.events);
  const started = events.lastIndexOf('on_chat_start');
  return (started >= 0 && events.indexOf('task_end', started + 1) > started) || performance.now() - last.last >= quiet;
}
"""

# What a switch that did not finish left in the page (for its failure's report).
_SWITCH_STATE = """
() => {
  const w = window.__eoSwitch || {};
  const r = (t) => t === null || t === undefined ? null : Math.round(t);
  return {now: r(performance.now()), switched_at: r(w.at), chat_mounted_at: r(w.mounted),
          chat_input: !!document.querySelector('#chat-input'),
          sockets: (window.__eoSockets || []).map(s => ({opened: r(s.at), last_frame: r(s.last), events: s.events.join(' ')}))};
}
"""


# The sidebar's request for the user's threads, as Chainlit's page makes it.
_LIST_THREADS = """
async () => {
  const r = await fetch('/project/threads', {method: 'POST', headers: {'content-type': 'application/json'},
                                              body: JSON.stringify({pagination: {first: 50}, filter: {}})});
  return {status: r.status, body: r.ok ? await r.json() : await r.text()};
}
"""


@dataclass
class Reply:
    text: str
    ttft: float | None  # seconds from Enter to the first visible text of the reply
    seconds: float  # until the stream ended (stop button gone, text stable for `settle`), from `reply()`
    lengths: list[int]  # every length the reply's text had while it streamed (recorded in the page)


class ChatPage:
    def __init__(self, page, base_url: str, shots: Path):
        self.page, self.base_url, self.shots = page, base_url, shots
        self._frames: list[str] = []
        self.sockets = 0  # websockets this page opened (a reconnect after a server restart opens one more)
        page.on("websocket", self._on_socket)
        page.add_init_script(_SOCKETS)  # from the next navigation (login) on
        page.add_init_script(_CSP)

    def _on_socket(self, ws) -> None:
        self.sockets += 1
        self._frames.clear()
        ws.on("framereceived", lambda payload: self._frames.append(payload if isinstance(payload, str) else ""))

    def csp_violations(self) -> list[dict]:
        """The Content-Security-Policy violations this page reported since it was loaded: [{directive, blocked}]."""
        return self.page.evaluate("window.__eoCsp || []")

    def frames_seen(self) -> str:
        """What the page's websockets brought (for a failure's report): the sockets it opened, the last frames."""
        sockets = self.page.evaluate("(window.__eoSockets || []).map(s => [Math.round(s.at), s.events.join(' ')])")
        lines = [f"websockets opened: {self.sockets}; (ms since page load, events): {sockets}"]
        return "\n".join(lines + [f[:2000] for f in self._frames[-40:]])

    def wait_asked(self, selector: str, timeout: float = 60) -> None:
        """Until the app asked for something on this page's socket (Chainlit's `ask` frame) and its input is in the
        page. Fails saying which of the two did not happen: an ask the page dropped (a later socket's
        connection_successful clears a pending ask) is not the same failure as an app that never asked."""
        deadline = time.monotonic() + timeout
        while not any(ASK_FRAME.match(f) for f in list(self._frames)):
            if time.monotonic() > deadline:
                raise AssertionError(f"the app did not ask within {timeout}s; {self.frames_seen()}")
            self.page.wait_for_timeout(50)
        try:
            self.page.wait_for_selector(selector, state="attached", timeout=max(1.0, deadline - time.monotonic()) * 1000)
        except Exception as exc:
            raise AssertionError(f"the app asked, but the page shows no {selector}: {exc}; {self.frames_seen()}") from None

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def login(self, user: str, password: str) -> None:
        self.page.goto(self.base_url + "/")
        self.page.wait_for_selector("#email", timeout=60_000)
        self.page.fill("#email", user)
        self.page.fill("#password", password)
        self.page.keyboard.press("Enter")

    def wait_ready(self, timeout: float = 60) -> None:
        """Until this page's socket session has run on_chat_start (see the module docstring)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frames = list(self._frames)
            started = next((i for i, f in enumerate(frames) if "on_chat_start" in f), None)
            if started is not None and any('"task_end"' in f for f in frames[started:]):
                self.page.wait_for_selector("#chat-input", timeout=10_000)
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"the chat session did not start within {timeout}s; frames: {self._frames[-5:]}")

    def wait_resumed(self, timeout: float = 60) -> None:
        """Until this page's socket has resumed a thread: Chainlit ran on_chat_resume and sent the thread's
        messages (its `resume_thread` frame; a resume runs no on_chat_start).

        Chainlit's page may connect twice on a reload (as on a profile switch, see `choose_profile`); the second
        socket resumes the thread again and re-renders its elements (a form typed into meanwhile is reset). So:
        resumed on the page's latest socket, and no new socket for `settle` seconds."""
        settle = 1.5
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(f.startswith('42["resume_thread"') for f in list(self._frames)):
                sockets = self.sockets
                self.page.wait_for_timeout(settle * 1000)
                if self.sockets == sockets and any(f.startswith('42["resume_thread"') for f in list(self._frames)):
                    self.page.wait_for_selector("#chat-input", timeout=10_000)
                    return
                continue
            self.page.wait_for_timeout(50)
        raise AssertionError(f"the thread was not resumed within {timeout}s (the page at {self.page.url}); {self.frames_seen()}")

    def reload(self) -> None:
        """Reload the page: a chat that has begun is at /thread/<id> and resumes (history on); else a new chat starts.
        Which one is read from the address the reload loaded, not the one before it: Chainlit moves to /thread/<id>
        when the app reports the thread's first interaction, which can land between a read and the reload (CI:
        the page resumed while this waited 60 s for a new chat's on_chat_start). A reload whose first socket closed
        before it began once opened a new chat instead (CI): the app's fix is chat_app/session_moves.py."""
        self._frames.clear()
        self.page.reload()
        self.wait_resumed() if "/thread/" in self.page.url else self.wait_ready()

    def new_chat(self) -> None:
        """A new chat at the app's root (what the sidebar's new-chat button leads to)."""
        self._frames.clear()
        self.page.goto(self.base_url + "/")
        self.wait_ready()

    def thread_id(self, timeout: float = 30) -> str:
        """The current thread's id, from the address Chainlit moves to after the chat's first message."""
        self.page.wait_for_url("**/thread/*", timeout=timeout * 1000)
        return self.page.url.rstrip("/").rsplit("/", 1)[-1]

    def thread_list(self, showing: str | None = None, timeout: float = 30) -> str:
        """The sidebar's thread list as text (group headings such as 今天 / Today, then thread names), once it shows
        `showing` (the list is fetched after the sidebar shows: a fixed wait read it before the fetch under load).
        Without `showing`, whatever it shows now (what a page lacks is asked of the app's route, not of this)."""
        if not self.page.locator("#thread-history").is_visible():
            self.page.click("#sidebar-trigger-button")
        self.page.wait_for_selector("#thread-history", timeout=timeout * 1000)
        if showing is not None:
            try:
                self.page.wait_for_function("(s) => document.querySelector('#thread-history')?.innerText.includes(s)", arg=showing,
                                            timeout=timeout * 1000)  # fmt: skip
            except Exception as exc:
                listed = self.page.locator("#thread-history").inner_text()
                raise AssertionError(f"the sidebar did not list {showing!r} within {timeout}s ({type(exc).__name__}): {listed!r}") from None
        return self.page.locator("#thread-history").inner_text()

    def listed_threads(self) -> list[dict]:
        """The user's threads as the app lists them to this page: the sidebar's own request (POST /project/threads),
        made from the page (its origin, its cookie, the browser's way to the host)."""
        got = self.page.evaluate(_LIST_THREADS)
        assert got["status"] == 200, got
        return got["body"]["data"]

    def open_thread(self, thread_id: str) -> None:
        """Click the thread in the sidebar: the page resumes it over a new socket."""
        self.thread_list()
        self._frames.clear()
        self.page.locator(f"#thread-{thread_id}").first.click()
        self.wait_resumed()

    def rate_last_reply(self, value: int, comment: str) -> None:
        """Thumbs up (1) or down (0) on the last reply, with a comment in Chainlit's feedback dialog."""
        kind = "positive" if value else "negative"
        self.page.locator(f".{kind}-feedback-off").last.click()
        self.page.get_by_role("dialog").locator("textarea").fill(comment)
        self.page.click("#submit-feedback")
        self.page.wait_for_selector(f".{kind}-feedback-on", timeout=15_000)

    def assistant_texts(self) -> list[str]:
        return [t.strip() for t in self.page.locator(ASSISTANT).all_inner_texts()]

    def send(self, text: str) -> int:
        """Type and press Enter; returns the number of assistant messages before it (for `reply`)."""
        n0 = self.page.locator(ASSISTANT).count()
        users = self.page.locator(USER).count()
        self.page.evaluate(_WATCH, n0)
        self.page.fill("#chat-input", text)
        self.page.keyboard.press("Enter")
        self.page.wait_for_function(f"document.querySelectorAll('{USER}').length > {users}", timeout=10_000)
        return n0

    def reply(self, n0: int, timeout: float = 120, settle: float = 1.0) -> Reply:
        """Wait until the reply to the last `send` is complete: no stop button, text unchanged for `settle`."""
        start = time.monotonic()
        loc = self.page.locator(ASSISTANT)
        last, stable_since = None, None
        while time.monotonic() - start < timeout:
            count = loc.count()
            text = loc.nth(count - 1).inner_text() if count > n0 else None
            if text != last:
                last, stable_since = text, time.monotonic()
            busy = self.page.locator("#stop-button").count() > 0
            if text is not None and not busy and time.monotonic() - stable_since >= settle:
                break
            self.page.wait_for_timeout(100)
        else:
            raise AssertionError(f"no complete reply within {timeout}s; assistant messages: {self.assistant_texts()[-3:]}")
        marks = self.page.evaluate("window.__eo")
        ttft = (marks["first"] - marks["t0"]) / 1000 if marks["first"] and marks["t0"] else None
        return Reply(text=self.assistant_texts()[-1], ttft=ttft, seconds=time.monotonic() - start, lengths=marks["lengths"])

    def wait_streaming(self, n0: int, chars: int = 20, timeout: float = 60) -> None:
        """Until the reply to the last `send` shows at least `chars` characters."""
        js = "([sel, n0, chars]) => { const m = document.querySelectorAll(sel); "
        js += "return m.length > n0 && m[m.length - 1].innerText.length >= chars; }"
        self.page.wait_for_function(js, arg=[ASSISTANT, n0, chars], timeout=timeout * 1000)

    def press_stop(self) -> None:
        """Press the stop button of the reply streaming now.

        A click event straight on the button (React's onClick -> Chainlit's stopTask over the socket), not a
        pointer click at its coordinates: while a reply streams the page re-lays out on every token, so
        Playwright's wait for a stable, unobscured button took 1.9 s here and in CI outlasted the whole
        300-token reply (the button was gone before the click landed).
        """
        button = self.page.locator("#stop-button")
        button.wait_for(state="visible", timeout=5_000)
        button.dispatch_event("click")

    def choose_profile(self, name: str, timeout: float = 60) -> None:
        """Switch scenario: a new chat session starts (after a confirmation when the chat has messages).

        Chainlit's page connects (debounced, 200 ms) when the profile changes, unmounts the chat until it has
        the new profile's settings (GET /project/settings), and connects again once they are there. Settings
        slower than 200 ms (a busy machine) give two sockets: the first runs on_chat_start, the chat is back,
        and 200 ms later the second replaces it (the server restores the session on it, and its
        connection_successful clears any pending ask). A message sent in between lost what came back on the
        first socket: Docs' AskFileMessage showed its upload button and the second socket took it away
        (CI: `#ask-button-input` not within 30 s; reproduced with the settings held 1.5 s in the page).
        So the switch is done when a socket opened after the chat came back and on_chat_start has ended
        (`_SWITCHED`), not when the first socket's session has started.
        """
        self.page.evaluate(_SWITCHING)
        self.page.click("#chat-profiles")
        self.page.click(f'[data-test="select-item:{name}"]')
        # a chat with messages asks to confirm; one without switches at once (the old chat input goes)
        self.page.wait_for_function("() => document.querySelector('#confirm') || !document.querySelector('#chat-input')?.__eoOld")
        if self.page.locator("#confirm").count():
            self.page.click("#confirm")
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.page.wait_for_function(_SWITCHED, arg=SETTLE_MS, timeout=max(1.0, deadline - time.monotonic()) * 1000)
            except Exception as exc:
                state = self.page.evaluate(_SWITCH_STATE)
                raise AssertionError(f"the switch to {name!r} did not finish within {timeout}s ({type(exc).__name__}); "
                                     f"the page (ms since load): {state}; {self.frames_seen()}") from None  # fmt: skip
            # and no socket after it: one more (a third connect seen on a slower machine) would clear a pending ask
            sockets = self.sockets
            self.page.wait_for_timeout(SETTLE_MS)
            if self.sockets == sockets or time.monotonic() > deadline:
                break
        self.page.wait_for_selector("#chat-input", timeout=10_000)

    def attach(self, paths: list[Path]) -> None:
        """Files into the composer through the paper clip's file input (Chainlit's spontaneous upload)."""
        self.page.set_input_files("#upload-button-input", [str(p) for p in paths])
        # each file shows as an attachment once uploaded to the session (Chainlit's POST /project/file)
        self.page.wait_for_function("() => !document.querySelector('#upload-button-loading')", timeout=60_000)

    def open_source(self, name: str, timeout: float = 15) -> tuple[str, str]:
        """Click the last reply's `name` (e.g. 【1】) and return the side panel's (title, text).

        Chainlit 2.12 opens the side panel by itself whenever new side elements arrive, listing all of the
        thread's under the newest one's name; a click shows just the clicked one. So: click until the panel
        is titled `name` (a late element update can re-open the all-elements view right after a click).
        """
        last = self.page.locator(ASSISTANT).last
        title = self.page.locator("#side-view-title")
        deadline = time.monotonic() + timeout
        while True:
            last.get_by_text(name, exact=True).first.click()
            self.page.wait_for_timeout(300)
            shown = title.first.inner_text().strip() if title.count() else ""
            if shown == name or time.monotonic() > deadline:
                break
        content = self.page.locator("#side-view-content")
        content.wait_for(state="visible", timeout=10_000)
        return shown, content.first.inner_text()
