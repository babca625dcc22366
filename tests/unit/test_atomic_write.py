"""files.atomic: one atomic write for every file the tools replace, on real files in tmp_path."""

from __future__ import annotations

import os
import stat

import pytest

from ernie_ops.files import atomic


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _leftovers(directory, keep: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != keep)


def test_a_new_file_is_written_0644_with_nothing_else_left(tmp_path):
    target = tmp_path / "upstream.conf"
    atomic.write_text(target, "server 127.0.0.1:8001;\n")
    assert target.read_text() == "server 127.0.0.1:8001;\n"
    assert _mode(target) == 0o644  # not mkstemp's 0600: `ernie-ops status` reads it without root
    assert _leftovers(tmp_path, "upstream.conf") == []


def test_an_existing_file_keeps_its_mode_unless_one_is_given(tmp_path):
    target = tmp_path / "users.yaml"
    target.write_text("old")
    target.chmod(0o640)
    atomic.write_bytes(target, b"new")
    assert (target.read_bytes(), _mode(target)) == (b"new", 0o640)
    atomic.write_text(target, "newer", mode=0o600)
    assert (target.read_text(), _mode(target)) == ("newer", 0o600)
    atomic.write_text(tmp_path / "fresh.yaml", "x", new_mode=0o640)
    assert _mode(tmp_path / "fresh.yaml") == 0o640


def test_prepare_sees_the_written_temp_file_before_it_replaces_the_target(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")
    seen = []

    def prepare(fd: int) -> None:
        seen.append((os.pread(fd, 100, 0), target.read_text()))

    atomic.write_text(target, "new", prepare=prepare)
    assert seen == [(b"new", "old")]
    assert target.read_text() == "new"


def test_two_writers_of_one_file_do_not_share_a_temp_file(tmp_path):
    """A second write of the same file starts while the first is half written (from inside the first
    one's writer): with a fixed temp name the second would overwrite the first's temp and rename it away,
    and the first's replace would fail. Unique temps: both finish, the later replace wins."""
    target = tmp_path / "applied.json"

    def first(f) -> None:
        f.write(b'{"first": ')
        atomic.write_text(target, '{"second": true}')
        assert target.read_text() == '{"second": true}'
        f.write(b"true}")

    atomic.write_with(target, first)
    assert target.read_text() == '{"first": true}'
    assert _leftovers(tmp_path, "applied.json") == []


class _DiskFull:
    """A fault a real disk does not produce on demand: the data's write fails half way (ENOSPC)."""

    def __call__(self, f) -> None:
        f.write(b"half of the new ")
        raise OSError(28, "No space left on device")


def test_a_failure_mid_write_leaves_the_old_file_intact_and_no_temp_behind(tmp_path):
    target = tmp_path / "rollout.json"
    target.write_text("the old record")
    target.chmod(0o644)
    with pytest.raises(OSError, match="No space left"):
        atomic.write_with(target, _DiskFull())
    assert target.read_text() == "the old record"
    assert _mode(target) == 0o644
    assert _leftovers(tmp_path, "rollout.json") == []


def test_a_failing_replace_leaves_no_temp_behind(tmp_path):
    target = tmp_path / "posts.csv"
    target.mkdir()  # a directory where the file should go: os.replace refuses (a real error, no stub)
    with pytest.raises(IsADirectoryError):
        atomic.write_bytes(target, b"a,b\n")
    assert target.is_dir()
    assert _leftovers(tmp_path, "posts.csv") == []


def test_a_missing_directory_is_an_os_error_the_caller_reports(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic.write_text(tmp_path / "no-such-dir" / "state.json", "{}")
