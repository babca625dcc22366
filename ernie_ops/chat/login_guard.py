"""Failed logins per user name: a lockout with backoff, so guessing one user's password stays slow even from
many addresses (nginx limits each address; this limits each name).

After FREE_FAILURES wrong passwords in a row a name is locked for FIRST_LOCK seconds, doubled at each further
failure up to MAX_LOCK; a login while locked is refused without checking the password (it costs the attacker a
try and the host no scrypt); a right password, once unlocked, clears the name. Kept in the chat process (each
chat host counts its own): a restart forgets, which costs an attacker a restart of someone else's service.
The table holds at most MAX_NAMES names, oldest dropped first, so names made up by the million cost bounded memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
FIRST_LOCK = 30.0
MAX_LOCK = 900.0
MAX_NAMES = 10_000


@dataclass
class _Record:
    failures: int = 0
    locked_until: float = 0.0


class LoginGuard:
    def __init__(self, clock: Callable[[], float] = time.monotonic, max_names: int = MAX_NAMES):
        self.clock = clock
        self.max_names = max_names
        self._names: OrderedDict[str, _Record] = OrderedDict()
        self._lock = threading.Lock()  # the login callback checks passwords in worker threads

    def __len__(self) -> int:
        """How many names the table holds."""
        return len(self._names)

    def locked_for(self, name: str) -> float:
        """Seconds until `name` may try again (0: it may now)."""
        with self._lock:
            record = self._names.get(name)
            return max(0.0, record.locked_until - self.clock()) if record else 0.0

    def failed(self, name: str) -> float:
        """A wrong password for `name`: the lock it now has, in seconds (0 while it still has free tries)."""
        with self._lock:
            record = self._names.pop(name, None) or _Record()
            self._names[name] = record  # the most recent at the end
            while len(self._names) > self.max_names:
                self._names.popitem(last=False)
            record.failures += 1
            over = record.failures - FREE_FAILURES
            if over < 0:
                return 0.0
            lock = min(MAX_LOCK, FIRST_LOCK * 2**over)
            record.locked_until = self.clock() + lock
            return lock

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._names.pop(name, None)
