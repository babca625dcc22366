"""The chat's per-name lockout (chat/login_guard.py) on a fake clock: five free wrong passwords, then a lock that
doubles with each further one up to 15 minutes; a right password clears the name; made-up names cost bounded memory."""

from __future__ import annotations

from ernie_ops.chat.login_guard import FIRST_LOCK, FREE_FAILURES, MAX_LOCK, LoginGuard


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_guesser_gets_five_tries_then_waits_longer_at_each_wrong_password():
    clock = Clock()
    guard = LoginGuard(clock)
    assert [guard.failed("alice") for _ in range(FREE_FAILURES - 1)] == [0.0] * (FREE_FAILURES - 1)
    assert guard.locked_for("alice") == 0.0
    locks = []
    for _ in range(8):
        locks.append(guard.failed("alice"))
        assert guard.locked_for("alice") == locks[-1]
        clock.t += locks[-1]  # waits it out, then guesses again
        assert guard.locked_for("alice") == 0.0
    assert locks == [FIRST_LOCK * 2**k for k in range(5)] + [MAX_LOCK] * 3 == [30, 60, 120, 240, 480, 900, 900, 900]
    assert guard.locked_for("bob") == 0.0  # another name is not touched


def test_a_right_password_clears_the_name():
    clock = Clock()
    guard = LoginGuard(clock)
    for _ in range(FREE_FAILURES):
        guard.failed("alice")
    assert guard.locked_for("alice") == FIRST_LOCK
    clock.t += FIRST_LOCK
    guard.succeeded("alice")
    assert [guard.failed("alice") for _ in range(FREE_FAILURES - 1)] == [0.0] * (FREE_FAILURES - 1)  # free tries again


def test_a_million_made_up_names_are_a_bounded_table():
    guard = LoginGuard(Clock(), max_names=100)
    for _ in range(FREE_FAILURES):
        guard.failed("alice")
    for n in range(1000):
        guard.failed(f"made-up-{n}")
    assert len(guard) == 100 and guard.locked_for("alice") == 0.0  # the oldest went first
