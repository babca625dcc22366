"""`ernie-ops logs`: the instances', the chat app's and the decisions' journal lines and the gateway's JSON
access log merged in time order, filtered by --since and --phases, as text or JSON; bad input is a sentence."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ernie_ops import cli, config
from ernie_ops.errors import ErnieOpsError, UsageError
from ernie_ops.observe import logview

T0 = 1_796_000_000.0  # 2026-12-02


def jline(at: float, message: str, unit: str | None = None, ident: str | None = None) -> str:
    obj = {"__REALTIME_TIMESTAMP": str(int(at * 1e6)), "MESSAGE": message}
    if unit:
        obj["_SYSTEMD_UNIT"] = unit
    if ident:
        obj["SYSLOG_IDENTIFIER"] = ident
    return json.dumps(obj)


def gline(at: float, uri: str = "/v1/completions", upstream: str = "127.0.0.1:8001", status: int = 200) -> str:
    return json.dumps({"time": "t", "msec": at, "client": "10.0.0.9", "request_id": "ab12", "method": "POST", "uri": uri,
                       "status": status, "bytes": 512, "request_time": 0.42, "upstream": upstream,
                       "upstream_status": str(status), "upstream_header_time": "0.031", "upstream_response_time": "0.420"})  # fmt: skip


@pytest.fixture
def cfg(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(gline(T0 + 2) + "\n" + "old text format line\n" + gline(T0 + 5, status=502) + "\n")
    return config.parse(f"instances: [{{port: 8000}}, {{port: 8001}}]\ngateway:\n  access_log: {log}\n")


JOURNAL = {
    "units": [
        jline(T0 + 1, "INFO [serve 8001] loading model /srv/models/x (engine pid 42)", unit="ernie-vllm@8001.service"),
        jline(T0 + 3, "(APIServer pid=42) INFO Route: /v1/completions", unit="ernie-vllm@8001.service"),
        jline(T0 + 6, "INFO [serve 8001] READY: http://127.0.0.1:8001 serves x", unit="ernie-vllm@8001.service"),
        "not json",
    ],
    "chat": [jline(T0 + 4, "chat: alice logged in", unit="ernie-chainlit.service")],
    "decisions": [jline(T0 + 7, "cutover 8000 -> 8001: promote: all traffic on 8001", ident="ernie-ops")],
}


def run_journal(argv: list[str]) -> list[str]:
    if "-t" in argv:
        return JOURNAL["decisions"]
    return JOURNAL["chat"] if "ernie-chainlit.service" in argv else JOURNAL["units"]


def read(cfg, names, **kw):
    warned = []
    kw = {"lines": 100, "since": None, "phases": False, **kw}
    got = logview.read(cfg, logview.select(cfg, names), run_journal=run_journal, warn=warned.append, **kw)
    return got, warned


def test_everything_is_merged_in_time_order_with_its_source(cfg):
    got, warned = read(cfg, [])
    assert [(round(e.at - T0), e.source) for e in got] == [
        (1, "8001"), (2, "gateway"), (3, "8001"), (4, "chat"), (5, "gateway"), (6, "8001"), (7, "ernie-ops")
    ]  # fmt: skip
    assert warned == []
    gw = got[1]
    assert "POST /v1/completions 200" in gw.message and "from 127.0.0.1:8001" in gw.message and "first byte 0.031s" in gw.message
    assert gw.request["request_id"] == "ab12"  # a request can be followed to its instance


def test_lines_since_and_phases_filter_the_merged_log(cfg):
    got, _ = read(cfg, [], lines=2)
    assert [e.source for e in got] == ["8001", "ernie-ops"]  # the last two of the whole, not of each source
    got, _ = read(cfg, [], since=T0 + 4.5)
    assert [round(e.at - T0) for e in got] == [5, 6, 7]
    got, _ = read(cfg, ["8001"], phases=True)
    assert [e.message.split("] ")[1][:8] for e in got] == ["loading ", "READY: h"]  # vLLM's own lines left out


def test_one_source_reads_only_its_own(cfg):
    sel = logview.select(cfg, ["gateway"])
    assert logview.journal_argv(sel, lines=5, since=None, follow=False) == []
    got, _ = read(cfg, ["gateway"])
    assert {e.source for e in got} == {"gateway"} and len(got) == 2
    argv = logview.journal_argv(logview.select(cfg, ["8000", "chat"]), lines=5, since=T0, follow=True, phases=True)
    assert argv[0][-2:] == ["-u", "ernie-vllm@8000.service"] and "--grep" in argv[0] and "-f" in argv[0]
    assert argv[1][-2:] == ["-u", "ernie-chainlit.service"] and "--grep" not in argv[1]  # phases: instances only
    assert argv[0][argv[0].index("--since") + 1] == f"@{T0:.0f}"


def test_an_unreadable_access_log_is_a_warning_and_the_rest_still_prints(cfg, tmp_path):
    (tmp_path / "access.log").unlink()
    got, warned = read(cfg, [])
    assert warned == [f"cannot read the gateway's access log {tmp_path / 'access.log'} (gateway.access_log): No such file or directory"]
    assert {e.source for e in got} == {"8001", "chat", "ernie-ops"}


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["web"], "unknown log source 'web': name an instance port, chat, gateway or ernie-ops"),
        (["9000"], "port 9000 is not an instance in the config (instances: 8000, 8001)"),
    ],
)
def test_an_unknown_source_is_a_usage_error(cfg, names, said):
    with pytest.raises(UsageError) as exc:
        logview.select(cfg, names)
    assert said in str(exc.value)


def test_since_takes_a_duration_or_a_date_time():
    assert logview.parse_since("10m", T0) == T0 - 600
    assert logview.parse_since("2026-12-02T10:00:00+00:00", T0) == 1_796_205_600.0
    with pytest.raises(UsageError, match="--since 'yesterday-ish': write a duration ago"):
        logview.parse_since("yesterday-ish", T0)


def test_the_cli_prints_json_lines_and_refuses_bad_input(cfg, tmp_path, capsys, monkeypatch):
    path = tmp_path / "ernie.yaml"
    path.write_text(config.dump(cfg))
    monkeypatch.setattr(logview, "read", lambda *a, **k: [logview.Entry(T0, "gateway", "POST / 200", {"status": 200})])
    assert cli.main(["--config", str(path), "logs", "gateway", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["source"] == "gateway" and line["request"] == {"status": 200} and line["time"].startswith("20")
    assert cli.main(["--config", str(path), "logs", "--since", "soon"]) == 2
    assert "--since 'soon'" in capsys.readouterr().err


class FakeJournal:
    """Stands in for a `journalctl -f -o json` child: its lines, then it ends (terminate() is recorded)."""

    def __init__(self, argv: list[str]):
        self.argv, self.stdout, self.terminated = argv, iter([*run_journal(argv)]), False

    def poll(self):
        return None if not self.terminated else 0

    def terminate(self):
        self.terminated = True

    def wait(self, timeout=None):
        return 0


def test_follow_prints_new_journal_and_gateway_lines_and_stops_its_children(cfg, tmp_path):
    import threading

    spawned, got, stop = [], [], threading.Event()

    def spawn(argv):
        spawned.append(FakeJournal(argv))
        return spawned[-1]

    def emit(e):
        got.append(e)
        if len(got) == 4:
            stop.set()

    def write_later():
        import time

        time.sleep(0.5)
        with (tmp_path / "access.log").open("a") as f:
            f.write(gline(T0 + 9) + "\n")

    writer = threading.Thread(target=write_later)
    writer.start()
    logview.follow(cfg, logview.select(cfg, ["8001", "ernie-ops", "gateway"]), phases=True, emit=emit, spawn=spawn, stop=stop)
    writer.join()
    sources = sorted(e.source for e in got)
    assert sources == ["8001", "8001", "ernie-ops", "gateway"], [e.line() for e in got]  # phases: vLLM's own line left out
    assert all("-f" in p.argv and p.argv[p.argv.index("-n") + 1] == "0" for p in spawned)
    assert all(p.terminated for p in spawned)
    assert [e.at for e in got if e.source == "gateway"] == [T0 + 9]  # only what was written after the start


def test_journal_lines_reads_a_command_s_output_and_warns_when_it_fails_without_any():
    warned: list[str] = []
    ok = [sys.executable, "-c", "print('a'); print('b')"]
    assert logview.journal_lines(ok, warned.append) == ["a", "b"] and warned == []
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('No journal files were found.\\n'); sys.exit(1)"]
    assert logview.journal_lines(failing, warned.append) == []
    assert warned == ["journalctl: No journal files were found."]


def test_an_absent_journalctl_is_a_sentence_when_reading_and_following(cfg, tmp_path):
    absent = str(tmp_path / "no-such-journalctl")
    with pytest.raises(ErnieOpsError, match="journalctl not found"):
        logview.journal_lines([absent], lambda text: None)

    def spawn(argv):  # the real Popen of a program that is not there
        return subprocess.Popen([absent, *argv[1:]], stdout=subprocess.PIPE, text=True)

    with pytest.raises(ErnieOpsError, match="journalctl not found"):
        logview.follow(cfg, logview.select(cfg, ["8000"]), phases=False, emit=lambda e: None, spawn=spawn)
