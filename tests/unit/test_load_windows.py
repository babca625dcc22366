"""tests/harness/load_windows.py: the gate files follow the hosts' windows (two instances active), with the linger."""

from __future__ import annotations

import subprocess
import time

from tests.harness import load_windows


class FakeHost:
    """`systemctl is-active` answers from `states`; touch/rm of gate files recorded in `files`."""

    def __init__(self, states: str = "active\ninactive\n"):
        self.states, self.files, self.fail = states, set(), False

    def run(self, cmd, check=True, timeout=600):
        if cmd[0] == "systemctl":
            if self.fail:
                raise AssertionError("nsenter timed out")
            return subprocess.CompletedProcess(cmd, 3, self.states, "")
        if cmd[0] == "touch":
            self.files.add(cmd[1])
        else:
            self.files.discard(cmd[-1])
        return subprocess.CompletedProcess(cmd, 0, "", "")


def wait_for(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)


def test_each_gate_opens_with_its_hosts_windows_and_closes_after_the_linger():
    a, b = FakeHost(), FakeHost()
    gates = [load_windows.Gate(a, "/run/a", frozenset({"a"})), load_windows.Gate(a, "/run/edge", frozenset({"a", "b"}))]
    a.files.add("/run/a")  # left over from a run before: removed at the start
    with load_windows.LoadWindows({"a": a, "b": b}, gates, every=0.01, linger=0.2) as windows:
        wait_for(lambda: "/run/a" not in a.files)
        b.states = "active\nactive\n"  # b's new instance is READY, its old one not stopped yet
        wait_for(lambda: "/run/edge" in a.files)
        assert "/run/a" not in a.files  # a's own gate follows a's window only
        b.states = "inactive\nactive\n"
        closed_at = time.monotonic()
        wait_for(lambda: "/run/edge" not in a.files)
        assert time.monotonic() - closed_at >= 0.15  # kept open for the linger: streams started just before still run
        a.states = "active\nactive\n"
        wait_for(lambda: {"/run/a", "/run/edge"} <= a.files)
    assert [len(windows.windows[h]) for h in ("a", "b")] == [1, 1]
    assert windows.windows["b"][0][1] is not None and windows.windows["a"][0][1] is None  # a's still open at the end
    assert windows.seconds("b") > 0 and "b: 1 window(s)" in windows.summary()


def test_a_failed_poll_is_recorded_and_keeps_the_gates_as_they_were():
    a = FakeHost("active\nactive\n")
    with load_windows.LoadWindows({"a": a}, [load_windows.Gate(a, "/run/a", frozenset({"a"}))], every=0.01, linger=0.0) as windows:
        wait_for(lambda: "/run/a" in a.files)
        a.fail = True
        wait_for(lambda: windows.errors)
        assert "/run/a" in a.files
    assert "nsenter timed out" in windows.errors[0]
