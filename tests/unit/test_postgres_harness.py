"""The PostgreSQL test harness says in one sentence what is missing, so the integration tier's PostgreSQL
modules skip locally and fail under CI with that sentence (tests/harness/tiers.py)."""

from __future__ import annotations

from tests.harness import postgres


def test_missing_binaries_named_with_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(postgres, "BIN_GLOB", str(tmp_path / "nowhere" / "*" / "bin"))
    reason = postgres.why_unavailable()
    assert reason is not None and "PostgreSQL is not installed" in reason and "postgresql package" in reason and "make test" in reason


def test_newest_major_version_chosen(monkeypatch, tmp_path):
    for major in ("9", "15", "13"):
        (tmp_path / major / "bin").mkdir(parents=True)
        for name in ("postgres", "initdb"):
            (tmp_path / major / "bin" / name).write_text("")
    (tmp_path / "17" / "bin").mkdir(parents=True)  # a client-only install: no server binaries
    monkeypatch.setattr(postgres, "BIN_GLOB", str(tmp_path / "*" / "bin"))
    assert postgres.bin_dir() == tmp_path / "15" / "bin"
