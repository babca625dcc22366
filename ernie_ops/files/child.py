"""One job in a child process with a memory cap and a time limit: a file that makes a parser blow up or hang costs
the child, never the caller (the chat app, where every user's requests share one process).

The parent runs `sys.executable -m <module>` in a private temporary directory (its cwd) and sends one JSON request
on stdin; the module's `__main__` calls `serve(job)`, which first caps its own address space (RLIMIT_AS =
request["memory_mb"]; set by the child, not by a preexec_fn, which is unsafe in a threaded parent), then writes
`job(request)`'s JSON answer on stdout. No answer within the timeout: the child is killed by its PID and reaped.
(docs/isolate.py does the same for document extraction, with its own outcomes.)

Fault injection, for tests only: FAULT_ENV in the child's environment makes `serve` hang or allocate until the
memory cap before the job, faults a real file cannot be made to produce on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FAULT_ENV = "ERNIE_OPS_CHILD_FAULT"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding ernie_ops/


@dataclass(frozen=True)
class Ended:
    """How the child ended: its answer (None when it gave none), or killed at the time limit, or dead of a signal."""

    answer: dict | None
    timed_out: bool = False
    returncode: int = 0
    stderr: str = ""

    def last_error_line(self) -> str:
        return " ".join(self.stderr.strip().splitlines()[-1:])[:200]


async def run(module: str, request: dict, timeout: float) -> Ended:
    """Run `module` as a child with `request` (memory_mb in it); cancelling the awaiting task kills the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="ernie-child-") as tmp:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, cwd=tmp, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout)
        except TimeoutError:
            _kill(proc.pid)
            await proc.wait()
            return Ended(None, timed_out=True)
        except BaseException:  # cancelled: the child must not outlive the request
            _kill(proc.pid)
            await proc.wait()
            raise
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    return Ended(answer if isinstance(answer, dict) else None, returncode=proc.returncode or 0, stderr=err.decode("utf-8", "replace"))


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def serve(job: Callable[[dict], dict]) -> int:
    """The child's side: read the request, cap memory, answer `job(request)`, or {"error": {"reason": "memory"}}."""
    import resource

    request = json.loads(sys.stdin.buffer.read())
    limit = int(request["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        _inject_fault(os.environ.get(FAULT_ENV, ""), int(request["memory_mb"]))
        answer = job(request)
    except MemoryError:
        answer = {"error": {"reason": "memory"}}
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "backslashreplace"))
    sys.stdout.buffer.flush()
    return 0


def _inject_fault(fault: str, memory_mb: int) -> None:
    """Test-only faults (see the module docstring)."""
    if fault == "hang":
        import time

        time.sleep(3600)
    elif fault == "oom":
        hoard = [bytearray(64 * 1024 * 1024) for _ in range(2 * memory_mb // 64 + 1)]  # MemoryError at the cap
        sys.stderr.write(f"the {memory_mb} MB memory cap was not enforced ({len(hoard)} blocks)\n")
        os._exit(3)
