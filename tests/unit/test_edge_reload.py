"""The edge's draining reload (ernie_ops/traffic/edge_reload.py) step by step, with the machine replaced by a recorder:
which nginx commands run in which order, how long it drains, that the flag is always lowered, and each failure's
sentence. The real nginx under load: tests/integration/test_edge.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ernie_ops.traffic import edge_reload
from ernie_ops.traffic.edge_reload import Host, ReloadError

PROJECT = Path(__file__).resolve().parents[2]


class Machine:
    def __init__(self, tmp: Path, dump: str = "keepalive_timeout 20s;", fail: str = "", settle_after: float = 0.0):
        self.calls: list[str] = []
        self.slept = 0.0
        self.now = 0.0
        self.dump, self.fail, self.settle_after = dump, fail, settle_after
        self.flag = tmp / "run" / "edge-draining"
        self.flag_seen: dict[str, bool] = {}
        self.reloaded_at: float | None = None

    def run(self, argv, **_):
        step = " ".join(argv[3:])
        self.calls.append(step)
        self.flag_seen[step] = self.flag.exists()
        if step == "-s reload":
            self.reloaded_at = self.now
        rc = 1 if step == self.fail else 0
        return subprocess.CompletedProcess(argv, rc, stdout=self.dump if step == "-T" else "", stderr="emerg: bad thing\ntest failed")

    def sleep(self, s: float) -> None:
        self.slept += s
        self.now += s

    def host(self) -> Host:
        return Host(
            ["/usr/sbin/nginx", "-c", "x.conf"],
            run=self.run,
            sleep=self.sleep,
            monotonic=lambda: self.now,
            workers=lambda master: [master + 1, master + 2],
            settled=lambda pid: self.reloaded_at is not None and self.now >= self.reloaded_at + self.settle_after,
            log=lambda line: None,
        )


@pytest.fixture
def pid_file(tmp_path):
    f = tmp_path / "nginx.pid"
    f.write_text("4242\n")
    return f


def test_drains_the_keepalive_timeout_then_reloads_and_lowers_the_flag(tmp_path, pid_file):
    m = Machine(tmp_path)
    waited = edge_reload.reload(m.host(), pid_file, m.flag)
    assert m.calls == ["-t", "-T", "-s reload"]
    assert m.flag_seen == {"-t": False, "-T": False, "-s reload": True}  # the flag was up when nginx reloaded
    assert waited == 21.0 and m.slept == pytest.approx(21.0)
    assert not m.flag.exists()


def test_waits_for_the_old_workers_to_shut_down_before_lowering_the_flag(tmp_path, pid_file):
    m = Machine(tmp_path, settle_after=0.5)
    edge_reload.reload(m.host(), pid_file, m.flag)
    assert m.slept == pytest.approx(21.5, abs=0.06)


@pytest.mark.parametrize(
    ("dump", "seconds"),
    [
        ("keepalive_timeout 0;\nkeepalive_timeout 20s;", 20.0),
        ("# keepalive_timeout 300s; in a comment\nkeepalive_timeout 1m;", 60.0),
        ("keepalive_timeout 500ms;", 0.5),
        ("server { listen 443; }", 75.0),  # nginx's default
        ("upstream x { keepalive 32; keepalive_timeout 4s; }\nkeepalive_timeout 15 10;", 15.0),
        # the connections to the gateways are no client's: a longer upstream keepalive_timeout does not count
        ("upstream x {\n    ip_hash;\n    keepalive_timeout 50s;\n}\nserver { keepalive_timeout 20s; }", 20.0),
    ],
)
def test_the_drain_lasts_the_longest_keepalive_timeout(dump, seconds):
    assert edge_reload.drain_seconds(dump) == seconds


def test_the_shipped_edge_site_drains_20_seconds():
    assert edge_reload.drain_seconds((PROJECT / "nginx" / "ernie-edge.conf").read_text()) == 20.0


def test_a_config_nginx_refuses_changes_nothing(tmp_path, pid_file):
    m = Machine(tmp_path, fail="-t")
    with pytest.raises(ReloadError, match=r"nginx -t refused the edge configuration, nothing was reloaded: emerg: bad thing"):
        edge_reload.reload(m.host(), pid_file, m.flag)
    assert m.calls == ["-t"] and m.slept == 0 and not m.flag.exists()


def test_a_failed_reload_lowers_the_flag(tmp_path, pid_file):
    m = Machine(tmp_path, fail="-s reload")
    with pytest.raises(ReloadError, match="nginx -s reload failed, the edge serves as before"):
        edge_reload.reload(m.host(), pid_file, m.flag)
    assert not m.flag.exists()


def test_workers_that_never_retire_are_reported_and_the_flag_lowered(tmp_path, pid_file):
    m = Machine(tmp_path, settle_after=1e9)  # nginx kept the old configuration (the new one failed to load)
    with pytest.raises(ReloadError, match="did not retire its workers within 30s"):
        edge_reload.reload(m.host(), pid_file, m.flag)
    assert not m.flag.exists()


def test_no_master_is_a_sentence(tmp_path):
    m = Machine(tmp_path)
    with pytest.raises(ReloadError, match=r"pid file .*missing\.pid is missing or empty; start the edge"):
        edge_reload.reload(m.host(), tmp_path / "missing.pid", m.flag)
    assert not m.flag.exists()


def test_the_cli_prints_one_line_and_exits_1(tmp_path, capsys):
    rc = edge_reload.main(["--pid-file", str(tmp_path / "none.pid"), "--flag", str(tmp_path / "f"), "--nginx", str(tmp_path / "no-nginx")])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("ernie-edge-reload: nginx binary") and err.count("\n") == 1 and "Traceback" not in err


def test_a_worker_title_says_whether_it_still_accepts(tmp_path):
    proc = tmp_path / "proc"
    for pid, title in ((10, b"nginx: worker process\0"), (11, b"nginx: worker process is shutting down\0"), (12, b"python3\0x")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(title)
        (proc / str(pid) / "stat").write_text(f"{pid} (nginx) S 7 1 1")
    assert [edge_reload.is_settled(p, proc) for p in (10, 11, 12, 13)] == [False, True, True, True]
    assert sorted(edge_reload.worker_pids(7, proc)) == [10, 11, 12]
