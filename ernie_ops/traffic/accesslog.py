"""The gateway's access log, read as it grows: each API request's outcome, per instance that served it.

nginx/ernie-ops.conf logs one JSON object per request (log_format ernie_ops): `upstream` and
`upstream_status` beside the final `status`. One request may have tried several instances
(`proxy_next_upstream`: a request refused, reset or answered 500 goes to the next server): "127.0.0.1:8001,
127.0.0.1:8000" with statuses "502, 200". Each attempt is an outcome of the instance it went to; an attempt
that failed before the request was sent still counts against that instance (a canary that refuses
connections is failing, even if nobody saw it).

`Tail` starts at the end of the file (only requests from now on count), follows a rotation (the file
was replaced or truncated: its inode changed or it shrank) and keeps a partial last line for the next read.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

API_PATHS = ("/v1/", "/tokenize")  # requests that are the model's work (not /health, /metrics, the chat app)
ATTEMPTS = re.compile(r"\s*[,:]\s+")  # ", " between servers of one group, " : " after an internal redirect


@dataclass
class Outcomes:
    """Requests per instance port since the last read: all, and those that failed (5xx or no answer)."""

    requests: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)

    def add(self, other: Outcomes) -> None:
        self.requests.update(other.requests)
        self.failed.update(other.failed)


def entry(line: str) -> dict | None:
    """One access-log line as its JSON object; None for anything else (a line of an older text format)."""
    try:
        got = json.loads(line)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def parse_line(line: str) -> list[tuple[int, bool]]:
    """(port, failed) for each attempt the request made; [] for a line that is not an API request."""
    e = entry(line)
    if e is None or not str(e.get("uri", "")).startswith(API_PATHS):
        return []
    addrs = [a for a in ATTEMPTS.split(str(e.get("upstream", "")).strip()) if a]
    codes = [c for c in ATTEMPTS.split(str(e.get("upstream_status", "")).strip()) if c]
    out = []
    for i, addr in enumerate(addrs):
        port = addr.rpartition(":")[2]
        if not port.isdigit():
            continue  # "" or "-" (nothing tried: e.g. refused by the API key check) or a unix socket
        last = i == len(addrs) - 1
        code = codes[i] if i < len(codes) else "-"
        if last and not code.isdigit():
            code = str(e.get("status", "-"))  # no upstream status (the client went away first): what nginx logged
        failed = not code.isdigit() or int(code) >= 500
        out.append((int(port), failed))
    return out


class Tail:
    def __init__(self, path: str | os.PathLike, from_start: bool = False):
        self.path = Path(path)
        self._inode: int | None = None
        self._offset = 0
        self._rest = b""
        self.problem: str | None = None  # why the log cannot be read (said once per read by the caller)
        if not from_start:
            try:
                st = self.path.stat()
                self._inode, self._offset = st.st_ino, st.st_size
            except OSError:
                pass

    def read_lines(self) -> list[str]:
        """The complete lines written since the last read (a partial last line waits for its end)."""
        try:
            with self.path.open("rb") as f:
                st = os.fstat(f.fileno())
                if self._inode is not None and (st.st_ino != self._inode or st.st_size < self._offset):
                    self._offset, self._rest = 0, b""  # rotated: the new file from its start
                self._inode = st.st_ino
                f.seek(self._offset)
                data = f.read()
                self._offset += len(data)
        except OSError as exc:
            self.problem = f"cannot read the gateway's access log {self.path} (gateway.access_log): {exc.strerror or exc}"
            return []
        self.problem = None
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        return [raw.decode("utf-8", "replace") for raw in lines]

    def read(self) -> Outcomes:
        """Each API request's attempts since the last read, per instance."""
        out = Outcomes()
        for line in self.read_lines():
            for port, failed in parse_line(line):
                out.requests[port] += 1
                if failed:
                    out.failed[port] += 1
        return out
