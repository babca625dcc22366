"""A test NOTIFY_SOCKET: receives what a launcher sends to systemd, with arrival times."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Message:
    at: float  # time.monotonic() on arrival
    fields: dict[str, str]


class NotifySocket:
    """Binds an AF_UNIX datagram socket like systemd's and records every message in a thread."""

    def __init__(self, path: Path):
        self.path = path
        self.messages: list[Message] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.monotonic()
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self._cond:
                self.messages.append(Message(now, fields))
                self._cond.notify_all()

    def _match(self, key: str, value: str | None, after: float) -> Message | None:
        for m in self.messages:
            if m.at >= after and key in m.fields and (value is None or m.fields[key] == value):
                return m
        return None

    def first(self, key: str, value: str | None = None, after: float = 0.0) -> Message | None:
        with self._cond:
            return self._match(key, value, after)

    def wait_for(self, key: str, value: str | None = None, timeout: float = 300.0, after: float = 0.0) -> Message | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = self._match(key, value, after)
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                self._cond.wait(left)

    def times(self, key: str) -> list[float]:
        with self._cond:
            return [m.at for m in self.messages if key in m.fields]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
        self.path.unlink(missing_ok=True)
