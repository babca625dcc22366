"""Cutover marks for the node exporter's textfile collector: the routed port from the real upstream include,
the newest end of each kind and outcome from the real state file, and a file that cannot be written is a
warning (a cutover never fails for a mark)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import generate_latest

from ernie_ops import config
from ernie_ops.host import state
from ernie_ops.traffic import marks


def cfg(tmp_path: Path, textfile: str | None) -> config.Config:
    return config.Config(
        paths={"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")},
        gateway={"upstream_file": str(tmp_path / "upstream.conf")},
        monitoring={"textfile": textfile},
    )


def test_the_newest_end_of_each_kind_and_outcome_and_the_routed_port():
    history = [
        {"at": "2026-12-01T10:00:00.000000Z", "kind": "cutover", "outcome": "promoted"},
        {"at": "2026-12-01T11:00:00.000000Z", "kind": "cutover", "outcome": "promoted"},
        {"at": "2026-12-01T10:30:00.000000Z", "kind": "cutover", "outcome": "rolled_back"},
        {"at": "2026-12-01T12:00:00.000000Z", "kind": "rollback", "outcome": "promoted"},
        {"at": "not a time", "kind": "cutover", "outcome": "failed"},  # an old or hand-edited entry: left out
        {"kind": "cutover"},
    ]
    reg = marks.registry(8001, history)
    assert reg.get_sample_value("ernie_ops_routed_port") == 8001

    def last(kind: str, outcome: str) -> float | None:
        return reg.get_sample_value("ernie_ops_cutover_last_timestamp_seconds", {"kind": kind, "outcome": outcome})

    assert last("cutover", "promoted") == datetime(2026, 12, 1, 11, tzinfo=UTC).timestamp()  # the newer of two
    assert last("cutover", "rolled_back") == datetime(2026, 12, 1, 10, 30, tzinfo=UTC).timestamp()
    assert last("rollback", "promoted") == datetime(2026, 12, 1, 12, tzinfo=UTC).timestamp()
    assert last("cutover", "failed") is None
    assert "ernie_ops_routed_port" not in generate_latest(marks.registry(None, history)).decode()


def test_written_from_the_include_and_the_state_file(tmp_path):
    textfile = tmp_path / "node-exporter" / "ernie_ops_cutover.prom"  # the directory is made if missing
    c = cfg(tmp_path, str(textfile))
    (tmp_path / "upstream.conf").write_text("server 127.0.0.1:8001 max_fails=0;\n")
    state.record(Path(c.paths.state_dir), {"kind": "cutover", "target": 8001, "source": 8000, "outcome": "promoted"}, 8001, 8000)
    assert marks.write(c) is None
    text = textfile.read_text()
    assert "ernie_ops_routed_port 8001.0" in text and 'kind="cutover",outcome="promoted"' in text
    # a split (canary step, or one interrupted): no single routed port is claimed
    (tmp_path / "upstream.conf").write_text("server 127.0.0.1:8000 weight=95;\nserver 127.0.0.1:8001 weight=5;\n")
    assert marks.write(c) is None
    assert "ernie_ops_routed_port " not in textfile.read_text()


def test_not_configured_writes_nothing_and_an_unwritable_place_is_a_warning(tmp_path):
    assert marks.write(cfg(tmp_path, None)) is None
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    warning = marks.write(cfg(tmp_path, str(blocker / "marks.prom")))
    assert warning is not None and str(blocker / "marks.prom") in warning and "monitoring.textfile" in warning


def test_the_config_takes_only_a_prom_file_path(tmp_path):
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="textfile"):
        cfg(tmp_path, "relative/marks.prom")
    with pytest.raises(ValidationError, match="textfile"):
        cfg(tmp_path, "/var/lib/prometheus/node-exporter/marks.txt")  # the collector reads *.prom only


def test_a_pool_says_its_size_and_the_replicas_in_rotation_from_the_include(tmp_path):
    """ErniePoolDegraded reads these: the pool watch rewrites them at every change (tests/unit/test_pool_watch.py)."""
    textfile = tmp_path / "marks.prom"
    c = config.Config(
        paths={"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")},
        gateway={"upstream_file": str(tmp_path / "upstream.conf")},
        monitoring={"textfile": str(textfile)},
        pool={"replicas": 2},
        instances=[{"port": 8000, "slot": 0, "cpu_cores": "0"}, {"port": 8001, "slot": 1, "cpu_cores": "1"}],
    )
    assert marks.write(c) is None  # no include yet: nothing in rotation
    assert "ernie_ops_pool_replicas 2.0" in textfile.read_text() and "ernie_ops_pool_replicas_in_rotation 0.0" in textfile.read_text()
    (tmp_path / "upstream.conf").write_text(
        "least_conn;\nserver 127.0.0.1:8000 max_fails=1 fail_timeout=5s;\nserver 127.0.0.1:8001 max_fails=1 fail_timeout=5s down;\n"
    )
    assert marks.write(c) is None
    text = textfile.read_text()
    assert "ernie_ops_pool_replicas 2.0" in text and "ernie_ops_pool_replicas_in_rotation 1.0" in text
    assert "ernie_ops_routed_port" not in text  # a pool routes no single port
    reg = marks.registry(None, [], (4, 3))
    assert reg.get_sample_value("ernie_ops_pool_replicas") == 4 and reg.get_sample_value("ernie_ops_pool_replicas_in_rotation") == 3
    assert (
        reg.get_sample_value("ernie_ops_pool_replicas") is not None
        and marks.registry(8000, []).get_sample_value("ernie_ops_pool_replicas") is None
    )
