"""What an operator reads when a unit does not start: `systemd.run_verb`, the one place every start goes through
(`ernie-ops apply`, the cutover's start step via hostops.RealHost, the Ansible role through apply). systemctl,
`systemctl show` and the journal are replaced by what they print on a host; the real path runs in
tests/e2e/test_ansible.py (an instance whose engine dies while loading, through the role)."""

from __future__ import annotations

import subprocess

import pytest

from ernie_ops.host import systemd

JOB_FAILED = (
    "Job for ernie-vllm@8000.service failed because the control process exited with error code.\n"
    'See "systemctl status ernie-vllm@8000.service" and "journalctl -xeu ernie-vllm@8000.service" for details.'
)
REASON = "engine exited with code 1 while loading; its last error: ValidationError: max_model_len (8192) is too long"
FAILED_RUN = [
    "Starting ernie-vllm@8000.service - ERNIE vLLM server on port 8000...",
    "INFO [serve 8000] launcher started (pid 4242)",
    "INFO [serve 8000] loading model /srv/models/ernie-tiny/current (engine pid 4250)",
    "ERROR [serve 8000] engine exited with code 1 while loading without being asked to stop",
    f"INFO [serve 8000] exit 1: {REASON}",
    "ernie-vllm@8000.service: Main process exited, code=exited, status=1/FAILURE",
]
RESTARTED = ["INFO [serve 8000] launcher started (pid 5151)"]  # Restart=on-failure, 5 s later


class FakeSystemd:
    """systemctl's exit and words per verb, `systemctl show`'s properties, and the journal's successive reads."""

    def __init__(self, monkeypatch, fail: dict[str, str], props: dict[str, str], journals: list[list[str] | None]):
        self.fail, self.props, self.journals, self.calls = fail, props, list(journals), []
        monkeypatch.setattr(systemd, "_systemctl", self._systemctl)
        monkeypatch.setattr(systemd, "show", lambda unit, *p: {k: v for k, v in self.props.items() if k in p})
        monkeypatch.setattr(systemd, "journal_lines", self._journal)
        monkeypatch.setattr(systemd.time, "sleep", lambda s: self.calls.append(("sleep", s)))

    def _systemctl(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        self.calls.append(args)
        words = self.fail.get(args[0])
        return subprocess.CompletedProcess(["systemctl", *args], 1 if words else 0, "", words or "")

    def _journal(self, port: int) -> list[str] | None:
        self.calls.append(("journal", port))
        return self.journals.pop(0) if len(self.journals) > 1 else self.journals[0]


def test_a_failed_instance_start_says_the_launchers_reason_and_the_journal_command(monkeypatch):
    FakeSystemd(monkeypatch, {"start": JOB_FAILED}, {"ExecMainPID": "4242", "StatusText": REASON}, [[*FAILED_RUN, *RESTARTED]])
    with pytest.raises(systemd.StartFailed) as err:
        systemd.start(8000, timeout=900)
    assert str(err.value) == f"ernie-vllm@8000.service did not start: {REASON}\nIts journal: journalctl -u ernie-vllm@8000 -n 100"
    assert err.value.reason == REASON and err.value.journal == "journalctl -u ernie-vllm@8000 -n 100"
    assert "systemctl status" not in str(err.value)  # systemd's pointer into a shell the user may never have entered


def test_apply_s_restart_of_an_instance_goes_through_the_same_message(monkeypatch):
    FakeSystemd(monkeypatch, {"restart": JOB_FAILED}, {"ExecMainPID": "4242"}, [FAILED_RUN])
    with pytest.raises(systemd.StartFailed, match=r"did not start: engine exited with code 1 while loading"):
        systemd.run_verb("restart", "ernie-vllm@8000.service", 900)


def test_the_exit_line_that_reaches_the_journal_a_moment_late_is_waited_for(monkeypatch):
    fake = FakeSystemd(monkeypatch, {"start": JOB_FAILED}, {"ExecMainPID": "4242"}, [FAILED_RUN[:4], FAILED_RUN[:4], FAILED_RUN])
    with pytest.raises(systemd.StartFailed) as err:
        systemd.start(8000, timeout=900)
    assert err.value.reason == REASON
    assert [c for c in fake.calls if c[0] == "journal"] == [("journal", 8000)] * 3


def test_without_a_journal_the_units_status_text_is_the_reason(monkeypatch):
    fake = FakeSystemd(monkeypatch, {"start": JOB_FAILED}, {"ExecMainPID": "4242", "StatusText": REASON}, [None])
    with pytest.raises(systemd.StartFailed) as err:
        systemd.start(8000, timeout=900)
    assert err.value.reason == f"the launcher's last status: {REASON}"
    assert not [c for c in fake.calls if c[0] == "sleep"]  # nothing to wait for


def test_another_unit_gets_systemctls_first_sentence_and_its_journal_command(monkeypatch):
    FakeSystemd(monkeypatch, {"start": JOB_FAILED.replace("ernie-vllm@8000", "ernie-chainlit")}, {}, [None])
    with pytest.raises(systemd.StartFailed) as err:
        systemd.run_verb("start", "ernie-chainlit.service", 60)
    assert str(err.value) == (
        "ernie-chainlit.service did not start: Job for ernie-chainlit.service failed because the control process exited "
        "with error code.\nIts journal: journalctl -u ernie-chainlit -n 100"
    )


def test_a_start_that_outlasts_its_timeout_names_the_journal_too(monkeypatch):
    monkeypatch.setattr(systemd, "_systemctl", lambda *a, timeout: (_ for _ in ()).throw(systemd.SystemdTimeout("did not finish")))
    with pytest.raises(systemd.StartFailed, match="did not start: did not finish\nIts journal: journalctl -u ernie-vllm@8001 -n 100"):
        systemd.start(8001, timeout=1)


def test_other_verbs_keep_systemctls_own_words(monkeypatch):
    FakeSystemd(monkeypatch, {"stop": "Failed to stop ernie-vllm@8000.service: Access denied"}, {}, [None])
    with pytest.raises(systemd.SystemdError) as err:
        systemd.stop(8000)
    assert not isinstance(err.value, systemd.StartFailed)
    assert str(err.value) == "systemctl stop ernie-vllm@8000.service failed: Failed to stop ernie-vllm@8000.service: Access denied"
