"""The chat's users file (`chat.users_file`, /etc/ernie-ops/chat-users.yaml): names and scrypt hashes.

Format (written by `ernie-ops chat-user add NAME`, readable by the service user only):

    users:
      alice: scrypt$16384$8$1$<salt, base64>$<key, base64>

scrypt is the standard library's (hashlib.scrypt, OpenSSL): no extra dependency for the chat venv,
memory-hard, parameters stored per hash so they can be raised later. The file is read at every
login, so an added or removed user takes effect without a restart.

Cost: OWASP's minimum, N=2^17, r=8, p=1 (128 MiB, 0.47 CPU-s per hash here; 2^14 was 0.06 s). A hash of
weaker parameters still logs in, and the chat app upgrades it at that good login: it cannot write the users
file (root's, read-only to the service), so the new hash goes to an overlay in its state dir
(`chat-users-upgraded.yaml`) that holds, per name, the new hash and a fingerprint of the file's hash it
replaces. It counts only while the users file still holds that hash: a password root sets later wins.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import grp
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

import yaml

from ernie_ops.errors import MISSING, ConfigError, ConfigProblem, UsageError
from ernie_ops.files import atomic, yamlfile

NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
MIN_PASSWORD = 8
N, R, P = 2**17, 8, 1
_MAXMEM = 256 * 1024 * 1024  # 128 * r * N = 128 MiB, and OpenSSL's own margin above it
UPGRADES_NAME = "chat-users-upgraded.yaml"  # the app's overlay of upgraded hashes, in its state dir
HEADER = "# ernie-ops chat users: `ernie-ops chat-user add NAME` adds or replaces one (scrypt hashes).\n"
SERVICE_GROUP = "ernie"


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=N, r=R, p=P, maxmem=_MAXMEM, dklen=32)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(key)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes]:
    scheme, n, r, p, salt, key = stored.split("$")
    if scheme != "scrypt":
        raise ValueError(f"unknown scheme '{scheme}'")
    return int(n), int(r), int(p), base64.b64decode(salt, validate=True), base64.b64decode(key, validate=True)


def verify_password(password: str, stored: str) -> bool:
    n, r, p, salt, key = _parse_hash(stored)
    got = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=len(key))
    return hmac.compare_digest(got, key)


@functools.cache
def _dummy() -> str:
    return hash_password(secrets.token_urlsafe(12))


def load(path: str) -> dict[str, str]:
    """{name: hash}; ConfigError naming file, line, user and problem when the file is not usable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        problem = ConfigProblem(path, None, "(file)", MISSING, "not found; add a user with `ernie-ops chat-user add NAME`")
        raise ConfigError([problem]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(path, None, "(file)", MISSING, f"cannot be read: {exc}")]) from None
    try:
        doc = yamlfile.load(text)
    except yaml.YAMLError as exc:  # a repeated key or where the parse stopped, with the parser's own words
        raise ConfigError(yamlfile.problems(exc, path)) from None
    data = doc.data
    if data is None:
        return {}
    if not isinstance(data, dict) or set(data) - {"users"} or not isinstance(data.get("users") or {}, dict):
        raise ConfigError([ConfigProblem(path, 1, "(top level)", MISSING, "must be a mapping `users: {NAME: HASH}`")])
    users: dict[str, str] = {}
    problems = []
    for name, stored in (data.get("users") or {}).items():
        where = doc.lines.get(("users", str(name)))
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(ConfigProblem(path, where, "users", name, "a user name is 1-64 of A-Z a-z 0-9 . _ @ -"))
            continue
        try:
            _parse_hash(stored)
        except (ValueError, AttributeError, TypeError):
            shown = stored if not isinstance(stored, str) else stored[:12] + ("…" if len(stored) > 12 else "")
            message = "not a password hash; set it with `ernie-ops chat-user add`"
            problems.append(ConfigProblem(path, where, f"users.{name}", shown, message))
            continue
        users[name] = stored
    if problems:
        raise ConfigError(problems)
    return users


def authenticate(path: str, name: str, password: str, upgrades: Path | None = None) -> bool:
    """True for a known user with the right password. As slow for unknown names (no user probing). With `upgrades`
    (the overlay file): its hash for `name` is used while it replaces the users file's, and a good login with a hash
    weaker than N, R, P writes a new one there (a failure to write it costs nothing but the upgrade)."""
    stored = load(path).get(name)
    current = stored
    overlay = _read_upgrades(upgrades) if upgrades is not None and stored else {}
    entry = overlay.get(name)
    if isinstance(entry, dict) and entry.get("replaces") == fingerprint(stored or "") and _usable(entry.get("hash")):
        current = entry["hash"]
    ok = verify_password(password, current or _dummy()) and stored is not None
    if ok and upgrades is not None and weaker(current):
        overlay[name] = {"replaces": fingerprint(stored), "hash": hash_password(password)}
        with contextlib.suppress(OSError):
            atomic.write_text(upgrades, yaml.safe_dump(overlay, sort_keys=True), new_mode=0o600)
    return ok


def credentials(path: str) -> dict[str, str]:
    """{name: fingerprint of its hash in the users file as it is now} (the overlay's upgrades change no fingerprint)."""
    return {name: fingerprint(stored) for name, stored in load(path).items()}


def weaker(stored: str) -> bool:
    """The hash's parameters are below this version's N, R, P."""
    n, r, p, _, _ = _parse_hash(stored)
    return n < N or r < R or p < P


def fingerprint(stored: str) -> str:
    """What a login token carries of the hash it was issued for (revocation.py): a new password ends old sessions."""
    return hashlib.sha256(stored.encode("utf-8")).hexdigest()


def _usable(stored: object) -> bool:
    try:
        _parse_hash(stored)  # type: ignore[arg-type]
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def _read_upgrades(path: Path) -> dict:
    """The overlay, or {} when it is missing or not a mapping (then the users file's hashes count, nothing lost)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def check_new(name: str, password: str) -> None:
    if not NAME.match(name):
        raise UsageError(f"user name '{name}' is not allowed: 1-64 of A-Z a-z 0-9 . _ @ -")
    if len(password) < MIN_PASSWORD:
        raise UsageError(f"the password is too short: at least {MIN_PASSWORD} characters")


def add(path: str, name: str, password: str) -> bool:
    """Add or replace `name`; returns True when the user is new. Writes atomically."""
    check_new(name, password)
    users = load(path) if Path(path).exists() else {}
    new = name not in users
    users[name] = hash_password(password)
    _write(Path(path), users)
    return new


def remove(path: str, name: str) -> None:
    users = load(path)
    if name not in users:
        raise UsageError(f"no user '{name}' in {path} (users: {', '.join(sorted(users)) or 'none'})")
    del users[name]
    _write(Path(path), users)


def _write(path: Path, users: dict[str, str]) -> None:
    """Temp file + rename; an existing file keeps its mode and owner, a new one is 0640 root:ernie."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = HEADER + yaml.safe_dump({"users": dict(sorted(users.items()))}, sort_keys=False, width=200)
    atomic.write_text(path, text, new_mode=0o640, prepare=lambda fd: _owner(path, fd))


def _owner(path: Path, fd: int) -> None:
    """As root: the existing file's owner, or root:ernie for a new one."""
    if os.geteuid() != 0:
        return
    if path.exists():
        st = path.stat()
        os.fchown(fd, st.st_uid, st.st_gid)
    else:
        with contextlib.suppress(KeyError):  # no service group (a developer's machine): the group stays
            os.fchown(fd, 0, grp.getgrnam(SERVICE_GROUP).gr_gid)
