"""Check a model directory against the `SHA256SUMS` the Ansible model role writes into it.

A half-copied model otherwise fails only after vLLM spent a minute loading, with a message that
does not say why. The check runs before the engine starts:
- every file the manifest lists exists;
- a `.safetensors` file is as long as its own header says (a truncated copy names both sizes:
  sha256sum format carries no sizes, the safetensors header does);
- every listed file hashes to its sha256 (measured here: 0.7 s for 720 MB, warm or cold page cache,
  against about a minute of model load; the read also warms the cache vLLM loads from next).
Files the manifest does not list are ignored; a directory without a manifest is not checked
(hand-made model directories have none).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MANIFEST_NAME = "SHA256SUMS"
_LINE = re.compile(r"^(\\?)([0-9a-fA-F]{64}) [ *](.+)$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    name: str  # relative to the model directory, as sha256sum wrote it
    digest: str  # lower-case hex


@dataclass(frozen=True)
class Problem:
    name: str
    detail: str  # completes "<name> ..." in a sentence

    def __str__(self) -> str:
        return f"{self.name} {self.detail}"


@dataclass(frozen=True)
class ManifestReport:
    manifest: Path
    files: int
    bytes_hashed: int
    seconds: float
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class ManifestError(ValueError):
    """The manifest itself cannot be read: a line that is not sha256sum output, or a path leaving the directory."""


def parse(text: str, source: str = MANIFEST_NAME) -> list[Entry]:
    """sha256sum's output format (text ` ` or binary `*` marker, `\\`-escaped names); blank lines ignored."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise ManifestError(f"{source}:{number} is not a sha256sum line (`<64 hex digits>  <file>`): {line[:80]!r}")
        escaped, digest, name = m.groups()
        if escaped:
            name = name.replace("\\\\", "\0").replace("\\n", "\n").replace("\\r", "\r").replace("\0", "\\")
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise ManifestError(f"{source}:{number} names {name!r}, outside the model directory")
        entries.append(Entry(name=name, digest=digest.lower()))
    return entries


def safetensors_expected_size(path: Path) -> int | None:
    """The length a safetensors file must have per its header (8-byte length, JSON, data); None if unreadable."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            (header_len,) = struct.unpack("<Q", head)
            if header_len > 100_000_000:
                return None
            header = json.loads(f.read(header_len))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(header, dict):
        return None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t]
    return 8 + header_len + max(ends, default=0)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def human_size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if n >= 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check(model_dir: Path) -> ManifestReport | None:
    """None when `model_dir` has no manifest; else every problem found (missing first, then short, then hash)."""
    manifest = model_dir / MANIFEST_NAME
    if not manifest.is_file():
        return None
    t0 = time.monotonic()
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{manifest} cannot be read: {exc}") from None
    entries = parse(text, str(manifest))
    problems: list[Problem] = []
    present: list[tuple[Entry, Path]] = []
    for e in entries:
        path = model_dir / e.name
        if not path.is_file():
            problems.append(Problem(e.name, f"is missing ({MANIFEST_NAME} lists it)"))
        else:
            present.append((e, path))
    for e, path in present:
        if path.suffix == ".safetensors":
            expected = safetensors_expected_size(path)
            size = path.stat().st_size
            if expected is None:
                problems.append(Problem(e.name, f"is {human_size(size)} with an unreadable safetensors header"))
            elif size != expected:
                problems.append(Problem(e.name, f"is {human_size(size)} of {human_size(expected)} (its safetensors header)"))
    hashed = 0
    if not problems:  # hashing a file already known to be short or missing adds only time
        for e, path in present:
            try:
                digest = sha256_of(path)
            except OSError as exc:
                problems.append(Problem(e.name, f"cannot be read: {exc.strerror}"))
                continue
            size = path.stat().st_size
            hashed += size
            if digest != e.digest:
                problems.append(Problem(e.name, f"does not match its sha256 in {MANIFEST_NAME} ({human_size(size)} on disk)"))
    return ManifestReport(manifest, len(entries), hashed, time.monotonic() - t0, tuple(problems))


def describe(model_dir: Path, report: ManifestReport, remedy: str) -> str:
    """One sentence for the operator: which files, and what to do."""
    shown = "; ".join(str(p) for p in report.problems[:3])
    more = f"; and {len(report.problems) - 3} more" if len(report.problems) > 3 else ""
    return f"model at {model_dir} is incomplete: {shown}{more}; {remedy}"
