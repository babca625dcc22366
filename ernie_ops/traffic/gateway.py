"""nginx, the only place that decides where traffic goes: the upstream include, `nginx -t`, reload.

Truth is read, not remembered: the routed port is whatever `upstream.conf` says. The file is
replaced atomically (temp file + rename in the same dir), so nginx never reads half of it.

Whether nginx runs is asked of the pid file of the configured nginx (`nginx -T`'s `pid`, else the
built-in default), so it works for Debian's nginx.service and for a private-prefix nginx alike.
"""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from ernie_ops.config import GatewayConfig
from ernie_ops.errors import ErnieOpsError
from ernie_ops.files import atomic
from ernie_ops.host import systemd
from ernie_ops.host.systemd import SystemdError

SERVER_LINE = re.compile(r"^\s*server\s+(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)\b([^;#]*);", re.M)
HEADER = "# Written by `ernie-ops` (cutover / rollback) only; do not edit by hand.\n"
PID_DIRECTIVE = re.compile(r"(?:^|[;{}])\s*pid\s+(\"[^\"]+\"|'[^']+'|[^\s;]+)\s*;", re.M)
DEFAULT_PID_FILE = "/run/nginx.pid"
NGINX_UNIT = "nginx.service"


class GatewayError(ErnieOpsError):
    """nginx refused a config or a reload; carries nginx's own message."""


STICKY_KEYS = {"api_key": "$ernie_sticky_key", "client": "$binary_remote_addr"}  # $ernie_sticky_key: nginx/ernie-ops.conf


def render_split(source: int, target: int, percent: int, sticky: str = "none") -> str:
    """A canary step: `percent` of requests to `target`, the rest to `source`. The shared `zone` makes every
    worker follow one set of weights (without it each worker balances its own share of connections);
    `hash ... consistent` (sticky) keeps a key on one side, and moves few keys when the weights change."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [HEADER, f"# canary since {stamp}: {target} at {percent}%, {source} at {100 - percent}%\n", "zone ernie_vllm 256k;\n"]
    if sticky != "none":
        lines.append(f"hash {STICKY_KEYS[sticky]} consistent;\n")
    lines.append(f"server 127.0.0.1:{source} weight={100 - percent} max_fails=0;\n")
    lines.append(f"server 127.0.0.1:{target} weight={percent} max_fails=0;\n")
    return "".join(lines)


SESSION_KEY = "$ernie_session_key"  # X-Session-Id (the chat's thread id), else the body's `user` (nginx/ernie-ops/session_key.js)


def render_pool(
    ports: list[int], balance: str = "least_conn", down: frozenset[int] = frozenset(), held: dict[int, str] | None = None
) -> str:
    """A pool of replicas in rotation (docs/design/replica-pool.md): every port a `server`, `down` ones marked so (out
    of rotation, the line kept for the watch to put back), balanced by `least_conn` (or nginx's round robin); requests
    with a session key go by the keyed twin (`render_keyed`), so few conversations move when a replica leaves. A request
    a replica refused, reset or answered 500 goes once to the next (proxy_next_upstream, nginx/ernie-ops/api-proxy.conf)
    and the failed one is skipped for 5 s (max_fails=1 fail_timeout=5s). The shared zone makes every worker balance from the same counts.
    `held`: port -> why an upgrade left it out (a gate it failed): `down` with a `# held:` comment, which the watch
    never puts back however well it answers /health (`held_of`)."""
    held = held or {}
    if not ports:
        raise ValueError("a pool needs at least one port")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [HEADER, f"# pool of {len(ports)} since {stamp}\n", "zone ernie_vllm 256k;\n"]
    if balance == "least_conn":
        lines.append("least_conn;\n")
    elif balance != "round_robin":
        raise ValueError(f"balance {balance!r} is not least_conn or round_robin")
    for p in sorted(ports):
        mark = " down" if p in down or p in held else ""
        note = f" {HELD}{held_note(held[p])}" if p in held else ""
        lines.append(f"server 127.0.0.1:{p} max_fails=1 fail_timeout=5s{mark};{note}\n")
    return "".join(lines)


KEYED_NAME = "upstream-keyed.conf"  # beside upstream.conf: the servers of `ernie_vllm_keyed` (nginx/ernie-ops.conf)
BALANCING = re.compile(r"^\s*(zone|hash|least_conn|ip_hash|random)\b[^;]*;[^\n]*\n?", re.M)


def render_keyed(text: str, session_affinity: bool = True) -> str:
    """The keyed twin of an upstream include: the group nginx/ernie-ops.conf sends requests with a session key to
    (the chat's thread id, a client's X-Session-Id). The same servers with the same weights and marks, so a keyed
    request goes wherever traffic may go now (a canary's split included); chosen by `hash <key> consistent` when
    `pool.session_affinity` is on, so a conversation stays on one replica and its prefix cache, else balanced as
    the unkeyed group is. Derived, never decided: `Gateway.write_upstream` writes both from one text."""
    kept = BALANCING.sub("", text.replace(HEADER, ""))
    own = "".join(m.group(0) for m in BALANCING.finditer(text) if m.group(1) != "zone")
    how = f"hash {SESSION_KEY} consistent;\n" if session_affinity else own
    note = "# the keyed twin of upstream.conf (same servers; requests with a session key)\n"
    return f"{HEADER}{note}zone ernie_vllm_keyed 256k;\n{how}{kept}"


def marks_of(text: str) -> dict[int, bool]:
    """Port -> marked `down` (out of rotation), for every loopback server line of an include."""
    return {int(m.group(1)): bool(re.search(r"\bdown\b", m.group(2))) for m in SERVER_LINE.finditer(text)}


HELD = "# held: "
HELD_NOTE = re.compile(SERVER_LINE.pattern + r"[ \t]*" + re.escape(HELD) + r"(.*)$", re.M)  # a server line, then its note


def held_note(why: str) -> str:
    """A hold's reason as the include keeps it: its first line (a newline would end the comment), at most 200 chars."""
    first = (why.strip().splitlines() or ["held"])[0].strip()
    return first if len(first) <= 200 else first[:199] + "…"


def held_of(text: str) -> dict[int, str]:
    """Port -> why an upgrade holds it out of rotation (`render_pool`'s `held`): the watch leaves these alone."""
    return {int(m.group(1)): m.group(3).strip() for m in HELD_NOTE.finditer(text)}


def marked_down(text: str) -> frozenset[int]:
    """The ports an include marks `down` (out of rotation: the pool watch's, or an upgrade step's)."""
    return frozenset(p for p, down in marks_of(text).items() if down)


def in_rotation(text: str) -> list[int]:
    """The ports an include sends requests to: every server line not marked `down`, in its order."""
    return [p for p, down in marks_of(text).items() if not down]


def with_marks(text: str, down: frozenset[int]) -> str:
    """The include with exactly the ports in `down` marked `down` (the pool watch's one edit), held ones always so;
    nothing else changes."""
    down = down | frozenset(held_of(text))

    def mark(m: re.Match) -> str:
        params = re.sub(r"\s+down\b", "", m.group(2))
        return f"{m.group(0)[: m.start(2) - m.start(0)]}{params}{' down' if int(m.group(1)) in down else ''};"

    return SERVER_LINE.sub(mark, text)


def render_upstream(port: int, previous: int | None = None) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    note = f"# active since {stamp}" + (f" (previous: {previous})" if previous else "") + "\n"
    return f"{HEADER}{note}server 127.0.0.1:{port} max_fails=0;\n"


def pid_file_of(dump: str, build_info: str, nginx_args: list[str]) -> Path:
    """The master's pid file: the `pid` directive in `nginx -T`'s dump, else `--pid-path` of `nginx -V`,
    else /run/nginx.pid; a relative path is relative to the prefix (`-p`, else `--prefix`)."""
    config_text = re.sub(r"#[^\n]*", "", dump)  # comments, including -T's "# configuration file X:" headers
    m = PID_DIRECTIVE.search(config_text)
    built = dict(re.findall(r"--([a-z-]+)=(\S+)", build_info))
    path = m.group(1).strip("\"'") if m else built.get("pid-path", DEFAULT_PID_FILE)
    if os.path.isabs(path):
        return Path(path)
    prefix = built.get("prefix", "/usr/share/nginx")
    for i, arg in enumerate(nginx_args):
        if arg == "-p" and i + 1 < len(nginx_args):
            prefix = nginx_args[i + 1]
        elif arg.startswith("-p") and len(arg) > 2:
            prefix = arg[2:]
    return Path(prefix) / path


def is_nginx(pid: int) -> bool:
    """A live process that is an nginx (not a stale pid file's number now used by another program)."""
    if pid <= 0:
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: existence only
        return _exists(pid)
    # the master's title is "nginx: master process /usr/sbin/nginx ..."; without a master, argv[0] is the binary
    return argv0.startswith(b"nginx:") or os.path.basename(argv0.split(b" ")[0]) == b"nginx"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def systemd_master(pid_file: Path, unit: str = NGINX_UNIT) -> int | None:
    """The main pid of an active nginx.service whose PIDFile is `pid_file`: the master runs even when its
    pid file went missing (then `nginx -s reload` fails later, at the switch, which rolls back)."""
    try:
        values = systemd.show(unit, "ActiveState", "MainPID", "PIDFile")
    except SystemdError:  # no systemd, or no such unit: nothing more to learn
        return None
    pid = int(values["MainPID"]) if values.get("MainPID", "").isdigit() else 0
    same_file = bool(values.get("PIDFile")) and os.path.realpath(values["PIDFile"]) == os.path.realpath(pid_file)
    if values.get("ActiveState") == "active" and same_file and is_nginx(pid):
        return pid
    return None


def parse_ports(text: str) -> list[int]:
    """Ports of the active (non-backup, non-down) server lines."""
    return list(parse_weights(text))


def parse_weights(text: str) -> dict[int, int]:
    """Port -> weight of the active server lines (weight 1 when not given)."""
    out = {}
    for m in SERVER_LINE.finditer(text):
        if re.search(r"\b(backup|down)\b", m.group(2)):
            continue
        w = re.search(r"\bweight=(\d+)", m.group(2))
        out[int(m.group(1))] = int(w.group(1)) if w else 1
    return out


def shares(weights: dict[int, int]) -> dict[int, float]:
    """Port -> share of traffic (0-100) from weights."""
    total = sum(weights.values()) or 1
    return {p: 100.0 * w / total for p, w in weights.items()}


class Gateway:
    def __init__(self, cfg: GatewayConfig, session_affinity: bool = True):
        self.cfg = cfg
        self.upstream = Path(cfg.upstream_file)
        self.keyed = self.upstream.with_name(KEYED_NAME)
        self.session_affinity = session_affinity  # pool.session_affinity: how the keyed twin chooses

    # -- reading ---------------------------------------------------------------------------
    def read_upstream(self) -> str:
        try:
            return self.upstream.read_text()
        except FileNotFoundError:
            raise GatewayError(f"upstream include {self.upstream} does not exist; provision nginx (Ansible role `nginx`)") from None

    def active_port(self) -> int | None:
        return self.single_port(self.read_upstream())

    def weights(self) -> dict[int, int]:
        return parse_weights(self.read_upstream())

    def single_port(self, text: str) -> int | None:
        weights = parse_weights(text)
        if len(weights) > 1:
            split = ", ".join(f"{p} {s:.0f}%" for p, s in shares(weights).items())
            raise GatewayError(
                f"{self.upstream} splits traffic ({split}): a canary rollout is under way or was interrupted; "
                "see `ernie-ops status`, then finish it (`ernie-ops cutover --promote`) or end it (`ernie-ops cutover --abort`)"
            )
        return next(iter(weights), None)

    # -- nginx -----------------------------------------------------------------------------
    def _nginx(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        argv = [self.cfg.nginx_binary, *self.cfg.nginx_args, *args]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise GatewayError(f"nginx binary {self.cfg.nginx_binary} not found (gateway.nginx_binary)") from None
        except subprocess.TimeoutExpired:
            raise GatewayError(f"`{' '.join(argv)}` did not finish within {timeout:.0f}s") from None

    def test(self) -> None:
        """`nginx -t` of the whole config as it is on disk now."""
        r = self._nginx("-t")
        if r.returncode != 0:
            raise GatewayError(f"nginx -t failed: {_last_lines(r.stderr)}")

    def pid_file(self) -> Path:
        """Where the configured nginx's master writes its pid (see `pid_file_of`)."""
        dump = self._nginx("-T")
        if dump.returncode != 0:
            raise GatewayError(f"nginx -T failed: {_last_lines(dump.stderr)}")
        build = self._nginx("-V")  # prints to stderr
        return pid_file_of(dump.stdout, build.stderr + build.stdout, list(self.cfg.nginx_args))

    def master_problem(self) -> str | None:
        """None when the configured nginx's master process runs; else the sentence saying so and what to do."""
        pid_file = self.pid_file()
        pid = read_pid(pid_file)
        if pid is not None and is_nginx(pid):
            return None
        if systemd_master(pid_file) is not None:
            return None
        return (
            f"nginx is not running (no master process for pid file {pid_file}); start it (systemctl start nginx) and rerun; "
            "nothing was changed"
        )

    def reload(self) -> None:
        """Graceful reload: in-flight requests finish on the old workers."""
        r = self._nginx("-s", "reload")
        if r.returncode != 0:
            raise GatewayError(f"nginx reload failed: {_last_lines(r.stderr)}")

    def apply(self) -> None:
        """What is on disk now goes live: `nginx -t`, then a graceful reload."""
        self.test()
        self.reload()

    # -- writing ---------------------------------------------------------------------------
    def write_upstream(self, text: str) -> None:
        """Atomic replace of the include and its keyed twin (`render_keyed`): a concurrent reload sees the old file
        or the new one, never half. The twin first: a reader of upstream.conf (the truth) never sees a route the
        twin has not got yet."""
        atomic.write_text(self.keyed, render_keyed(text, self.session_affinity))
        atomic.write_text(self.upstream, text)  # keeps the file's mode (0644 when new)

    def keyed_in_step(self) -> bool:
        """Whether the keyed twin is what upstream.conf makes it (False on a host upgraded from before the twin)."""
        try:
            return self.keyed.read_text() == render_keyed(self.read_upstream(), self.session_affinity)
        except FileNotFoundError:
            return False

    def switch(self, port: int) -> None:
        """All traffic to `port` (from one port or a canary split)."""
        ports = parse_ports(self.read_upstream())
        self._replace(render_upstream(port, ports[0] if len(ports) == 1 and ports[0] != port else None))

    def split(self, source: int, target: int, percent: int, sticky: str = "none") -> None:
        """A canary step: `percent` of requests to `target` (`render_split`)."""
        self._replace(render_split(source, target, percent, sticky))

    def route_pool(
        self, ports: list[int], balance: str = "least_conn", down: frozenset[int] | None = None, held: dict[int, str] | None = None
    ) -> None:
        """Every replica in `ports` a server (`render_pool`), the `down` ones out of rotation, the `held` ones out with
        their reason; None: as the include has them (a port the watch marked `down` stays so, a held one stays held)."""
        if down is None or held is None:
            try:
                text = self.read_upstream()
            except GatewayError:
                text = ""  # no include yet
            marked, kept = marks_of(text), held_of(text)
            down = frozenset(p for p in ports if marked.get(p)) if down is None else down
            held = {p: why for p, why in kept.items() if p in ports} if held is None else held
        self._replace(render_pool(ports, balance, down, held))

    def mark_down(self, down: frozenset[int]) -> None:
        """Take the ports in `down` out of rotation and put every other back (the pool watch), on the include as it is."""
        self._replace(with_marks(self.read_upstream(), down))

    def _replace(self, text: str) -> None:
        """Write, `nginx -t`, reload. On any failure the previous file is back in place (none: the new one removed)."""
        try:
            previous_text: str | None = self.read_upstream()
        except GatewayError:
            previous_text = None  # a fresh host's first include
        self.write_upstream(text)
        try:
            self.apply()
        except BaseException:
            if previous_text is None:
                self.upstream.unlink(missing_ok=True)
                self.keyed.unlink(missing_ok=True)
            else:
                self.write_upstream(previous_text)
            raise

    def restore(self, text: str) -> None:
        """Put a previous upstream back and reload (the undo of `switch`)."""
        self.write_upstream(text)
        self.apply()


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "(no output)"
