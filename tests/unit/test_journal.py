"""The engine's own error, found in real vLLM 0.32 (CPU) output, and `systemd.start_failure`'s message.

tests/unit/data/*.log are real captures: `python -m vllm.entrypoints.openai.api_server` on a copy of the
tiny model, stdout then stderr, once with model.safetensors truncated to 400 000 of 724 288 bytes and once
with max_position_embeddings lowered below --max-model-len.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from ernie_ops.host import systemd
from ernie_ops.serving import enginelog

DATA = Path(__file__).parent / "data"
TRUNCATED = (DATA / "vllm_truncated_weights.log").read_text().splitlines()
MAX_LEN = (DATA / "vllm_max_model_len.log").read_text().splitlines()
SAFETENSORS = "SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered"


def test_root_cause_beats_the_wrappers_that_follow_it():
    # the output ends with "RuntimeError: Engine core initialization failed. See root cause above."
    assert TRUNCATED[-1].startswith("RuntimeError: Engine core initialization failed")
    assert enginelog.engine_error(TRUNCATED) == SAFETENSORS


def test_validation_error_carries_its_detail_line():
    error = enginelog.engine_error(MAX_LEN)
    assert error.startswith(
        "ValidationError: 1 validation error for ModelConfig: Value error, User-specified max_model_len (2048) is greater than the derived"
    )
    assert len(error) <= enginelog.MAX_LEN


def test_a_wrapper_alone_is_still_reported():
    lines = ["RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    assert enginelog.engine_error(lines) == lines[0]


def test_an_error_log_line_without_exception():
    lines = [
        "(APIServer pid=1) INFO 12-01 23:41:04 [api_utils.py:347] version 0.32.0",
        "(EngineCore pid=2) ERROR 12-01 23:42:08 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=2) ERROR 12-01 23:42:08 [core.py:1510] Traceback (most recent call last):",
    ]
    assert enginelog.engine_error(lines) == "EngineCore failed to start."


def test_no_error_at_all():
    assert enginelog.engine_error(TRUNCATED[:30]) is None  # banner, warnings mentioning `OSError: ...` mid-line
    assert any("OSError: [Errno 24]" in line for line in TRUNCATED[:30])


def journal(port: int, engine: list[str], previous: list[str] = ()) -> list[str]:
    """`journalctl -o cat -u ernie-vllm@PORT` of a failed start: the launcher's lines around the engine's."""
    tag = f"INFO [serve {port}]"
    return [
        *previous,
        f"Starting ernie-vllm@{port}.service - ERNIE vLLM server on port {port}...",
        f"{tag} launcher started (pid 4242)",
        f"{tag} checking /srv/models/ernie/current against SHA256SUMS",
        f"{tag} starting engine (cpu): /opt/ernie-ops/venv/bin/python -m vllm.entrypoints.openai.api_server ...",
        *engine,
        f"ERROR [serve {port}] engine exited with code 1 while loading without being asked to stop",
        f"{tag} exit 1: engine exited with code 1 while loading",
        f"ernie-vllm@{port}.service: Main process exited, code=exited, status=1/FAILURE",
    ]


def test_start_failure_names_the_launchers_reason_and_the_engines_error():
    text = systemd.start_failure(journal(8000, TRUNCATED), 8000)
    assert text == f"engine exited with code 1 while loading; the engine's last error: {SAFETENSORS}"


def test_start_failure_reads_the_last_attempt_only():
    """A manifest failure prints no engine lines: the previous attempt's SafetensorError must not be blamed."""
    earlier = journal(8000, TRUNCATED)
    now = [
        "INFO [serve 8000] launcher started (pid 5151)",
        "INFO [serve 8000] exit 2: model at /srv/models/ernie/current is incomplete: model.safetensors is 391 KB of 707 KB",
    ]
    text = systemd.start_failure([*earlier, *now], 8000)
    assert text == "model at /srv/models/ernie/current is incomplete: model.safetensors is 391 KB of 707 KB"


def test_start_failure_reads_the_attempt_systemd_ran_not_the_restart_after_it():
    """Restart=on-failure starts a new launcher 5 s after the failure: the failed one is ExecMainPID's."""
    restarted = ["INFO [serve 8000] launcher started (pid 5151)", "INFO [serve 8000] checking /srv/models/ernie/current"]
    text = systemd.start_failure([*journal(8000, TRUNCATED), *restarted], 8000, pid=4242)
    assert text.startswith("engine exited with code 1 while loading") and SAFETENSORS in text


def test_start_failure_does_not_repeat_what_the_launcher_quoted():
    lines = journal(8000, TRUNCATED)
    lines[-2] = f"INFO [serve 8000] exit 1: engine exited with code 1 while loading; its last error: {SAFETENSORS}"
    assert systemd.start_failure(lines, 8000).count("SafetensorError") == 1


def test_start_failure_without_an_exit_line_says_the_last_status_or_line():
    lines = journal(8000, [])[:-2]  # killed before its exit line
    assert systemd.start_failure(lines, 8000, status_text="loading model /m (engine pid 7)") == (
        "the launcher's last status: loading model /m (engine pid 7)"
    )
    assert systemd.start_failure(lines, 8000).startswith("the launcher's last line: engine exited with code 1 while loading")


def test_start_failure_without_a_journal():
    assert systemd.start_failure(None, 8000) == "(journal unavailable)"
    assert systemd.start_failure(None, 8000, status_text="engine exited with code 0 while loading") == (
        "the launcher's last status: engine exited with code 0 while loading"
    )


def test_tee_passes_every_byte_through_and_keeps_the_error():
    """The launcher's pipe: a real os.pipe written with the captured output."""
    r, w = os.pipe()
    sink = io.BytesIO()
    tee = enginelog.Tee(os.fdopen(r, "rb"), sink).start()
    data = ("\n".join(TRUNCATED) + "\n").encode()
    with os.fdopen(w, "wb") as f:
        f.write(data)
    tee.join(5)
    assert not tee.thread.is_alive()
    assert sink.getvalue() == data
    assert tee.engine_error() == SAFETENSORS


def test_tee_keeps_draining_when_the_journal_is_gone():
    class Gone(io.RawIOBase):
        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")

    r, w = os.pipe()
    tee = enginelog.Tee(os.fdopen(r, "rb"), Gone()).start()
    with os.fdopen(w, "wb") as f:
        f.write(b"x" * 200_000 + b"\nValueError: still read\n")  # more than a pipe holds: a stuck reader blocks this write
    tee.join(5)
    assert tee.engine_error() == "ValueError: still read"


def test_tee_thread_never_takes_the_launchers_stop_signals():
    """With SIGTERM deliverable to the reader thread, the handler ran in the main thread at a random bytecode,
    once inside sdnotify's bare `except:`, and the stop was lost (the drain test failed 2 runs in 9)."""
    import signal

    r, w = os.pipe()
    tee = enginelog.Tee(os.fdopen(r, "rb"), io.BytesIO()).start()
    try:
        status = Path(f"/proc/self/task/{tee.thread.native_id}/status").read_text()
        blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGABRT):
            assert blocked & (1 << (sig - 1)), f"{sig.name} is deliverable to the reader thread"
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGTERM}, "the caller's mask was left changed"
    finally:
        os.close(w)
        tee.join(5)


def test_tee_ends_a_cut_short_last_line():
    """Measured: vLLM's last line (a nanobind leak notice) has no newline; the launcher's next line ran into it."""
    r, w = os.pipe()
    sink = io.BytesIO()
    tee = enginelog.Tee(os.fdopen(r, "rb"), sink).start()
    with os.fdopen(w, "wb") as f:
        f.write(b"first\nSee https://nanobind.readthedocs.io/en/latest/refleaks.html")
    tee.join(5)
    assert sink.getvalue() == b"first\nSee https://nanobind.readthedocs.io/en/latest/refleaks.html\n"
