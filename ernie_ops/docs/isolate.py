"""Run `extract` in a child process, so a crash, a hang or a memory blow-up inside a PDF/DOCX library stays
there: the parent (the chat app, the CLI) gets a DocumentError with one sentence and carries on.

The child is `sys.executable -m ernie_ops.docs.isolate` (the same interpreter and package), started in a
private temporary directory (its cwd, so nothing there can shadow a module) holding the file's bytes. The
parent sends one JSON request on stdin ({"path", "name", "limits", "memory_mb"}); the child first limits its
own address space (RLIMIT_AS = memory_mb; set by the child rather than a preexec_fn, which is unsafe in a
threaded parent such as the chat app), extracts, and writes one JSON object on stdout: {"ok": Extracted} or
{"error": {"reason", "message"}}, which the parent turns back into the same Extracted or DocumentError.

Outcomes the parent maps itself: no answer within `timeout` seconds -> the child is killed by its PID
(SIGKILL) and reaped, reason "timeout"; killed by a signal (a segfault in a C extension, the kernel's OOM
killer) or exiting without an answer -> "crashed"; a MemoryError at the RLIMIT_AS limit -> "crashed" with
the limit named.

Fault injection, for tests only: the environment variable ERNIE_OPS_DOCS_FAULT, read by the child only,
makes it segfault (`segv`: SIGSEGV to itself), hang (`hang`), allocate until the memory limit (`oom`), or
print garbage (`garbage`) before extracting, faults a real file cannot be made to produce on demand.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from ernie_ops.docs.extract import Limits, as_document_error, extract_raw
from ernie_ops.docs.model import DocumentError, Extracted, Section

FAULT_ENV = "ERNIE_OPS_DOCS_FAULT"
DEFAULT_LIMITS = Limits()
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding ernie_ops/


def extract_isolated(data: bytes, name: str, limits: Limits = DEFAULT_LIMITS, *, timeout: float = 60, memory_mb: int = 1024) -> Extracted:
    """extract() in a child process; same result and DocumentErrors, plus "timeout" and "crashed"."""
    with tempfile.TemporaryDirectory(prefix="ernie-docs-") as tmp:
        request = _prepare(Path(tmp), data, name, limits, memory_mb)
        proc = subprocess.Popen(_command(), cwd=tmp, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(request, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc.pid)
            proc.communicate()
            raise DocumentError(
                name, "timeout", f"extraction stopped after {timeout:g} seconds (the file is too slow to read); the file was not indexed"
            ) from None
        except BaseException:  # KeyboardInterrupt and the like: never leave the child behind
            _kill(proc.pid)
            proc.wait()
            raise
        return outcome(name, proc.returncode, out, err, memory_mb)


def _prepare(tmp: Path, data: bytes, name: str, limits: Limits, memory_mb: int) -> bytes:
    path = tmp / "input"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return json.dumps({"path": str(path), "name": name, "limits": asdict(limits), "memory_mb": memory_mb}).encode()


def _command() -> list[str]:
    return [sys.executable, "-m", "ernie_ops.docs.isolate"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def outcome(name: str, returncode: int, out: bytes, err: bytes, memory_mb: int) -> Extracted:
    """The child's answer as an Extracted, or the DocumentError it reported or its death implies."""
    if returncode < 0:
        sig = -returncode
        try:
            signame = signal.Signals(sig).name
        except ValueError:
            signame = "an unknown signal"
        raise DocumentError(name, "crashed", f"extraction stopped (killed by signal {sig}, {signame}); the file was not indexed")
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        e = answer["error"]
        raise DocumentError(name, str(e.get("reason", "crashed")), str(e.get("message", "extraction failed")))
    if isinstance(answer, dict) and isinstance(answer.get("ok"), dict):
        try:
            return extracted_from_json(answer["ok"])
        except (KeyError, TypeError, ValueError):
            pass
    last = " ".join(err.decode("utf-8", "replace").strip().splitlines()[-1:])[:200]
    said = f": {last}" if last else ""
    raise DocumentError(
        name,
        "crashed",
        f"extraction stopped (the extractor exited with status {returncode} without an answer{said}); the file was not indexed",
    )


def extracted_to_json(extracted: Extracted) -> dict:
    return {
        "kind": extracted.kind,
        "pages": extracted.pages,
        "encoding": extracted.encoding,
        "empty_pages": list(extracted.empty_pages),
        "sections": [{"text": s.text, "page": s.page, "heading": list(s.heading)} for s in extracted.sections],
    }


def extracted_from_json(obj: dict) -> Extracted:
    sections = [Section(str(s["text"]), page=s["page"], heading=tuple(str(h) for h in s["heading"])) for s in obj["sections"]]
    empty = tuple(int(n) for n in obj.get("empty_pages") or ())
    return Extracted(str(obj["kind"]), sections, pages=obj["pages"], encoding=obj.get("encoding"), empty_pages=empty)


# ----------------------------------------------------------------------------------------------- child


def _inject_fault(fault: str, memory_mb: int) -> None:
    """Test-only faults (see the module docstring)."""
    if fault == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "hang":
        import time

        time.sleep(3600)
    elif fault == "oom":
        hoard = []
        for _ in range(2 * memory_mb // 64 + 1):  # 64 MB at a time until RLIMIT_AS stops it (MemoryError)
            hoard.append(bytearray(64 * 1024 * 1024))
        sys.stderr.write(f"the {memory_mb} MB memory limit was not enforced\n")  # a bug: never reached with RLIMIT_AS
        os._exit(3)
    elif fault == "garbage":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
        os._exit(0)


def _child() -> int:
    import logging
    import resource

    request = json.loads(sys.stdin.buffer.read())
    name, memory_mb = request["name"], int(request["memory_mb"])
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about damaged files would only be noise on stderr
    try:
        fault = os.environ.get(FAULT_ENV, "")
        if fault:
            _inject_fault(fault, memory_mb)
        data = Path(request["path"]).read_bytes()
        answer = {"ok": extracted_to_json(extract_raw(data, name, Limits(**request["limits"])))}
    except MemoryError:
        answer = {
            "error": {
                "reason": "crashed",
                "message": f"extraction stopped (it ran out of memory at the {memory_mb} MB limit); the file was not indexed",
            }
        }
    except Exception as exc:
        error = as_document_error(exc, name)
        answer = {"error": {"reason": error.reason, "message": str(error).removeprefix(f"{name}: ")}}
    # backslashreplace writes a lone surrogate (a non-UTF-8 name) as the JSON escape \udcXX, which reads back as itself
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "backslashreplace"))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child())
