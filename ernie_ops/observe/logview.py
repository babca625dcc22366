"""`ernie-ops logs`: the whole service's logs merged in time order.

Sources: each instance's journal (ernie-vllm@PORT), the chat app's (ernie-chainlit.service), the decisions
`ernie-ops cutover` writes to the journal (syslog identifier ernie-ops), and the gateway's JSON access log
(nginx/ernie-ops.conf: which instance answered each request, its status and times). The journal is read as
`journalctl -o json` (its own timestamps), the access log by its `msec`; both become `Entry`s, merged by time.

Parsing and merging are pure; reading (journalctl, the file) is injected, so the logic is unit-tested from text.
"""

from __future__ import annotations

import functools
import heapq
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Queue

from ernie_ops import durations
from ernie_ops.config import Config
from ernie_ops.errors import ErnieOpsError, UsageError
from ernie_ops.traffic import accesslog

CHAT_UNIT = "ernie-chainlit.service"
DECISIONS_IDENT = "ernie-ops"  # rollout.journal's syslog identifier
UNIT_PORT = re.compile(r"^ernie-vllm@(\d+)\.service$")
PHASE = re.compile(r"\[serve \d+\]")  # the launcher's own lines, not vLLM's
NAMED = ("chat", "gateway", "ernie-ops")
TAIL_BYTES = 4 << 20  # the access log's last 4 MiB hold far more than -n lines
NO_JOURNALCTL = "journalctl not found: the instances and the chat app log to the systemd journal"


@dataclass(frozen=True, order=True)
class Entry:
    at: float  # Unix seconds
    source: str = field(compare=False)  # "8000", "chat", "gateway", "ernie-ops"
    message: str = field(compare=False)
    request: dict | None = field(default=None, compare=False)  # the gateway's JSON object

    def as_dict(self) -> dict:
        out = {"time": iso(self.at), "source": self.source, "message": self.message}
        if self.request is not None:
            out["request"] = self.request
        return out

    def line(self) -> str:
        return f"{iso(self.at)} [{self.source}] {self.message}"


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).astimezone().isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Selection:
    ports: list[int]
    chat: bool
    gateway: bool
    decisions: bool


def select(cfg: Config, names: list[str]) -> Selection:
    """What `ernie-ops logs [SOURCE ...]` reads; no SOURCE: everything."""
    if not names:
        return Selection([i.port for i in cfg.instances], chat=True, gateway=True, decisions=True)
    ports, bad = [], []
    for name in names:
        if name.isdigit():
            cfg.instance(int(name))  # an unknown port is a usage error naming the configured ones
            ports.append(int(name))
        elif name not in NAMED:
            bad.append(name)
    if bad:
        raise UsageError(f"unknown log source {', '.join(map(repr, bad))}: name an instance port, chat, gateway or ernie-ops")
    return Selection(ports, chat="chat" in names, gateway="gateway" in names, decisions="ernie-ops" in names)


def parse_since(text: str, now: float) -> float:
    """`--since`: a duration ago (600, 90s, 10m, 1.5h) or a local date-time (2026-12-02 14:00[:00], ISO 8601)."""
    if (ago := durations.seconds(text, durations.CLOCK)) is not None:
        return now - ago
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since {text!r}: write a duration ago (e.g. 10m, 2h) or a date-time (e.g. '2026-12-02 14:00')") from None
    return stamp.timestamp() if stamp.tzinfo else stamp.astimezone().timestamp()


# -- the journal ---------------------------------------------------------------------------------------
def journal_argv(sel: Selection, *, lines: int | None, since: float | None, follow: bool, phases: bool = False) -> list[list[str]]:
    """journalctl invocations (JSON) for the selection: the instances, the chat app, the decisions, each its own
    (a unit match and an identifier match in one invocation would be ANDed; --phases greps the instances only,
    so -n counts phase lines)."""
    common = ["journalctl", "--no-pager", "-o", "json"]
    if lines is not None:
        common += ["-n", str(lines)]
    if since is not None:
        common += ["--since", f"@{since:.0f}"]
    if follow:
        common.append("-f")
    out = []
    if sel.ports:
        grep = ["--grep", PHASE.pattern] if phases else []
        out.append([*common, *grep, *(a for p in sel.ports for a in ("-u", f"ernie-vllm@{p}.service"))])
    if sel.chat:
        out.append([*common, "-u", CHAT_UNIT])
    if sel.decisions:
        out.append([*common, "-t", DECISIONS_IDENT])
    return out


def _text(value: object) -> str:
    if isinstance(value, list):  # journald's binary-safe form: a list of byte values
        return bytes(v for v in value if isinstance(v, int)).decode("utf-8", "replace")
    return "" if value is None else str(value)


def journal_entry(line: str) -> Entry | None:
    """One `journalctl -o json` line as an Entry; None for anything else."""
    try:
        obj = json.loads(line)
        at = int(obj["__REALTIME_TIMESTAMP"]) / 1e6
    except (ValueError, KeyError, TypeError):
        return None
    unit = _text(obj.get("_SYSTEMD_UNIT") or obj.get("UNIT"))
    ident = _text(obj.get("SYSLOG_IDENTIFIER"))
    m = UNIT_PORT.match(unit)
    if ident == DECISIONS_IDENT:
        source = DECISIONS_IDENT
    elif m:
        source = m.group(1)
    elif unit == CHAT_UNIT:
        source = "chat"
    else:
        source = unit or ident or "journal"
    return Entry(at, source, _text(obj.get("MESSAGE")).rstrip("\n"))


# -- the gateway ---------------------------------------------------------------------------------------
def gateway_entry(line: str) -> Entry | None:
    """One access-log line (JSON) as an Entry: what was asked, what answered, how long it took."""
    e = accesslog.entry(line)
    if e is None:
        return None
    try:
        at = float(e["msec"])
    except (KeyError, TypeError, ValueError):
        return None
    upstream = e.get("upstream") or "-"
    status = e.get("upstream_status") or "-"
    ttfb = e.get("upstream_header_time") or "-"
    message = (
        f"{e.get('method', '?')} {e.get('uri', '?')} {e.get('status', '?')} in {e.get('request_time', '?')}s "
        f"from {upstream} ({status}, first byte {ttfb}s) {e.get('bytes', 0)} B client {e.get('client', '-')}"
    )
    return Entry(at, "gateway", message, e)


def last_lines(path: Path, limit: int = TAIL_BYTES) -> list[str]:
    """The file's complete lines within its last `limit` bytes."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - limit))
        data = f.read()
    lines = data.decode("utf-8", "replace").split("\n")
    if size > limit:
        lines = lines[1:]  # the first one is cut
    return [line for line in lines if line]


# -- merging -------------------------------------------------------------------------------------------
def merged(streams: Iterable[Iterable[Entry]], *, since: float | None, lines: int | None, phases: bool) -> list[Entry]:
    """Every stream's entries in time order (each sorted first: journald interleaves its files), filtered,
    the last `lines` of the whole."""
    out = [
        e
        for e in heapq.merge(*(sorted(s) for s in streams))
        if (since is None or e.at >= since) and (not phases or not e.source.isdigit() or PHASE.search(e.message))
    ]
    return out[-lines:] if lines is not None else out


def journal_lines(argv: list[str], warn: Callable[[str], None]) -> list[str]:
    """journalctl's output lines for one `journal_argv` invocation; a failure without output is told to `warn`
    (e.g. no permission to read the journal), an absent journalctl is an ErnieOpsError."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ErnieOpsError(NO_JOURNALCTL) from None
    if r.returncode != 0 and not r.stdout:
        warn(f"journalctl: {r.stderr.strip() or f'exit {r.returncode}'}")
    return r.stdout.splitlines()


def read(
    cfg: Config,
    sel: Selection,
    *,
    lines: int | None,
    since: float | None,
    phases: bool,
    warn: Callable[[str], None],
    run_journal: Callable[[list[str]], list[str]] | None = None,
) -> list[Entry]:
    """The selection's entries once (no --follow). `run_journal(argv)` returns journalctl's output lines
    (default: `journal_lines`, journalctl itself, its failures told to `warn`)."""
    run_journal = run_journal or functools.partial(journal_lines, warn=warn)
    streams: list[list[Entry]] = []
    for argv in journal_argv(sel, lines=lines, since=since, follow=False, phases=phases):
        streams.append([e for e in map(journal_entry, run_journal(argv)) if e is not None])
    if sel.gateway:
        path = cfg.gateway.access_log
        if path is None:
            warn("the gateway's access log is off (gateway.access_log: null): no gateway lines")
        else:
            try:
                streams.append([e for e in map(gateway_entry, last_lines(Path(path))) if e is not None])
            except OSError as exc:
                warn(f"cannot read the gateway's access log {path} (gateway.access_log): {exc.strerror or exc}")
    return merged(streams, since=since, lines=lines, phases=phases)


def follow_gateway(path: Path, stop: Callable[[], bool], every: float = 0.25) -> Iterator[Entry]:
    """New access-log lines as they are written (rotation followed), until stop()."""
    tail = accesslog.Tail(path)
    while not stop():
        for raw in tail.read_lines():
            e = gateway_entry(raw)
            if e is not None:
                yield e
        time.sleep(every)


def follow(
    cfg: Config,
    sel: Selection,
    *,
    phases: bool,
    emit: Callable[[Entry], None],
    spawn: Callable[[list[str]], subprocess.Popen] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """New entries of every selected source as they come (after what `read` printed), until `stop` or Ctrl-C.
    The journalctl processes are this process's children, stopped by their PIDs on the way out."""
    spawn = spawn or (lambda argv: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    stop = stop or threading.Event()
    queue: Queue[Entry] = Queue()
    try:
        procs = [spawn(argv) for argv in journal_argv(sel, lines=0, since=None, follow=True, phases=phases)]
    except FileNotFoundError:
        raise ErnieOpsError(NO_JOURNALCTL) from None

    def pump(proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            e = journal_entry(line)
            if e is not None:
                queue.put(e)

    def gateway(path: Path) -> None:
        for e in follow_gateway(path, stop.is_set):
            queue.put(e)

    threads = [threading.Thread(target=pump, args=(p,), daemon=True) for p in procs]
    if sel.gateway and cfg.gateway.access_log:
        threads.append(threading.Thread(target=gateway, args=(Path(cfg.gateway.access_log),), daemon=True))
    for t in threads:
        t.start()
    try:
        while not stop.is_set():
            try:
                e = queue.get(timeout=0.2)
            except Empty:
                if procs and all(p.poll() is not None for p in procs) and not sel.gateway:
                    return  # journalctl ended (e.g. no journal): nothing more will come
                continue
            if not phases or not e.source.isdigit() or PHASE.search(e.message):
                emit(e)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
