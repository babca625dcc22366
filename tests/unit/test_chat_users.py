"""The users file and `ernie-ops chat-user`: scrypt hashes, atomic writes, errors with file:line, no tracebacks."""

from __future__ import annotations

import io
import stat

import pytest
import yaml

from ernie_ops import cli
from ernie_ops.chat import users
from ernie_ops.errors import ConfigError, UsageError


def test_hash_round_trip_and_salt():
    a, b = users.hash_password("correct horse"), users.hash_password("correct horse")
    assert a != b and a.startswith("scrypt$131072$8$1$")  # OWASP's minimum: N=2^17, r=8, p=1
    assert users.verify_password("correct horse", a) and not users.verify_password("correct hors", a)


def test_add_replace_remove_and_authenticate(tmp_path):
    path = str(tmp_path / "etc" / "chat-users.yaml")
    assert users.add(path, "alice", "pass-word-1") is True
    assert users.add(path, "bob@example.org", "another-pass") is True
    assert users.add(path, "alice", "new-pass-word") is False  # replaced
    assert stat.S_IMODE((tmp_path / "etc" / "chat-users.yaml").stat().st_mode) == 0o640
    assert users.authenticate(path, "alice", "new-pass-word")
    assert not users.authenticate(path, "alice", "pass-word-1")
    assert not users.authenticate(path, "mallory", "new-pass-word")
    users.remove(path, "bob@example.org")
    assert list(users.load(path)) == ["alice"]
    with pytest.raises(UsageError, match=r"no user 'bob@example.org' in .* \(users: alice\)"):
        users.remove(path, "bob@example.org")
    assert [p.name for p in (tmp_path / "etc").iterdir()] == ["chat-users.yaml"]  # no temp file left


def test_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "u.yaml"
    users.add(str(path), "alice", "pass-word-1")
    path.chmod(0o600)
    users.add(str(path), "carol", "pass-word-2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(("name", "password", "message"), [
    ("al ice", "pass-word-1", "user name 'al ice' is not allowed"),
    ("x" * 65, "pass-word-1", "is not allowed"),
    ("alice", "short", "too short: at least 8"),
])  # fmt: skip
def test_bad_names_and_passwords(tmp_path, name, password, message):
    with pytest.raises(UsageError, match=message):
        users.add(str(tmp_path / "u.yaml"), name, password)
    assert not (tmp_path / "u.yaml").exists()


def problems(tmp_path, text: str) -> list:
    path = tmp_path / "u.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        users.load(str(path))
    return info.value.problems


def test_broken_files_name_file_line_and_user(tmp_path):
    good = users.hash_password("pass-word-1")
    (p,) = problems(tmp_path, f"users:\n  alice: {good}\n  bob: hunter2-plaintext\n")
    assert (p.line, p.field, p.value) == (3, "users.bob", "hunter2-plai…") and "not a password hash" in p.message
    assert "u.yaml:3: users.bob = 'hunter2-plai…'" in str(p)
    (p,) = problems(tmp_path, "users:\n  'bad name': x\n")
    assert p.line == 2 and "user name" in p.message
    (p,) = problems(tmp_path, "users: [alice]\n")
    assert "must be a mapping" in p.message
    (p,) = problems(tmp_path, "users:\n  alice: [\n")
    # the parser's own words, not only "not valid YAML": the operator sees what to mend
    assert p.field == "(yaml)" and p.line is not None and "not valid YAML: expected" in p.message
    with pytest.raises(ConfigError, match="not found; add a user"):
        users.load(str(tmp_path / "missing.yaml"))
    assert users.load(str(_write(tmp_path / "empty.yaml", ""))) == {}


def test_a_user_listed_twice_is_refused_naming_both_lines(tmp_path):
    good, other = users.hash_password("pass-word-1"), users.hash_password("pass-word-2")
    # PyYAML alone kept the second hash: the password that worked depended on which line came last
    (p,) = problems(tmp_path, f"users:\n  alice: {good}\n  bob: {good}\n  alice: {other}\n")
    assert str(p) == f"{tmp_path / 'u.yaml'}:4: users.alice: duplicate key; first at line 2; keep only one of them"
    (p,) = problems(tmp_path, f"users:\n  alice: {good}\nusers:\n  bob: {other}\n")
    assert (p.line, p.field) == (3, "users") and "first at line 1; merge the two sections" in p.message
    path = _write(tmp_path / "u.yaml", f"users:\n  alice: {good}\n  alice: {other}\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        users.add(str(path), "carol", "pass-word-3")  # not rewritten with one of the two silently dropped
    assert path.read_text().count("alice") == 2


def _write(path, text):
    path.write_text(text)
    return path


def test_cli_add_reads_the_password_from_stdin(tmp_path, monkeypatch, capsys):
    path = tmp_path / "u.yaml"
    monkeypatch.setattr("sys.stdin", io.StringIO("pass-word-1\n"))
    assert cli.main(["chat-user", "add", "alice", "--users-file", str(path)]) == 0
    assert "added alice" in capsys.readouterr().err
    assert users.authenticate(str(path), "alice", "pass-word-1")
    assert cli.main(["chat-user", "list", "--users-file", str(path)]) == 0
    assert capsys.readouterr().out.split() == ["alice"]
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert cli.main(["chat-user", "add", "alice", "--users-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "too short" in err and "Traceback" not in err
    assert cli.main(["chat-user", "remove", "nobody", "--users-file", str(path)]) == 2
    assert "no user 'nobody'" in capsys.readouterr().err


def test_cli_uses_the_configured_users_file(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "ernie.yaml"
    cfg.write_text(f"chat:\n  users_file: {tmp_path / 'from-config.yaml'}\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("pass-word-1\n"))
    assert cli.main(["--config", str(cfg), "chat-user", "add", "dev"]) == 0
    assert list(users.load(str(tmp_path / "from-config.yaml"))) == ["dev"]
    (tmp_path / "broken.yaml").write_text("users:\n  dev: nope\n")
    assert cli.main(["chat-user", "list", "--users-file", str(tmp_path / "broken.yaml")]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml:2: users.dev = 'nope'" in err and "Traceback" not in err


def _old_hash(password: str) -> str:
    """A hash as this project wrote them before (N=2^14), made with hashlib directly."""
    import base64
    import hashlib

    salt = b"0123456789abcdef"
    key = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt$16384$8$1${base64.b64encode(salt).decode()}${base64.b64encode(key).decode()}"


def test_a_weak_hash_still_logs_in_and_the_app_upgrades_it_in_its_overlay_until_root_sets_another(tmp_path):
    path, overlay = tmp_path / "chat-users.yaml", tmp_path / "state" / users.UPGRADES_NAME
    overlay.parent.mkdir()
    path.write_text(f"users:\n  alice: {_old_hash('old-pass-1')}\n  bob: {_old_hash('bobs-pass-1')}\n")
    assert not users.authenticate(str(path), "alice", "wrong-pass", overlay) and not overlay.exists()  # a wrong one writes nothing
    assert users.authenticate(str(path), "alice", "old-pass-1", overlay)
    upgraded = yaml.safe_load(overlay.read_text())["alice"]["hash"]
    assert upgraded.startswith("scrypt$131072$8$1$") and stat.S_IMODE(overlay.stat().st_mode) == 0o600
    assert path.read_text().count("scrypt$16384$") == 2  # root's file untouched
    assert users.authenticate(str(path), "alice", "old-pass-1", overlay) and not users.authenticate(str(path), "alice", "x", overlay)
    assert yaml.safe_load(overlay.read_text())["alice"]["hash"] == upgraded  # strong now: not rewritten
    users.add(str(path), "alice", "root-set-pass")  # root sets a new password: the overlay no longer speaks for alice
    assert not users.authenticate(str(path), "alice", "old-pass-1", overlay)
    assert users.authenticate(str(path), "alice", "root-set-pass", overlay)
    overlay.write_text("not: [a, mapping")  # a broken overlay costs nothing but the upgrades
    assert users.authenticate(str(path), "bob", "bobs-pass-1", overlay)
