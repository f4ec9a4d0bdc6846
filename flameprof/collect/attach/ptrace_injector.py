"""Queue the attach bootstrap in a live CPython process: flameprof's own ptrace injector.

What it needs is checked first, without touching the process: Linux on x86-64 with the injector
built (``flameprof._inject``), and the five functions it calls exported by the process's files
(``elf_symbols.py``). ``injector_process.py`` then runs in a process of its own: it proves the
injection on a throwaway process, then borrows the target's main thread for well under a
millisecond (``native/inject.c``: whole register state saved and restored, interrupted system
calls restarted) to map one page, write the bootstrap into it and queue it with
``Py_AddPendingCall``. The interpreter runs it in its main thread between two bytecodes.

CPython 3.14's ``sys.remote_exec`` (PEP 768) does the same without ptrace; it slots in beside
``inject`` as a second route once flameprof supports 3.14 targets.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

from ...errors import FlameprofError, InjectUnavailable
from ..process_alive import alive
from .elf_symbols import resolve
from .target import TargetProcess, explain_ptrace_failure
from .watch import RETRY

HELPER_TIMEOUT = 60.0
CALL_TIMEOUT = 2.0  # one call in the target (mmap, Py_AddPendingCall) returns in microseconds

_MESSAGES = {
    "not-initialized": "the Python interpreter in the process is not running (starting up or shutting down)",
    "mmap": "could not map memory in the process",
    "queue-full": "the interpreter's pending-call queue is full",
    "stopped": "the process is stopped (SIGSTOP or Ctrl-Z); resume it with kill -CONT first",
}


def unavailable() -> str | None:
    """Why this machine cannot inject (decided without any process), or None."""
    try:
        from ... import _inject
    except ImportError:
        return "the injector was not built (a C compiler and Python's headers are needed at install)"
    if not _inject.supported():
        return f"injection is implemented for Linux on x86-64, not {sys.platform} on {platform.machine()}"
    return None


def inject(target: TargetProcess, payload: bytes) -> None:
    """Queue ``payload`` (Python source, ASCII) in ``target``'s main thread.

    Raises InjectUnavailable when it cannot work for this process (the caller may use py-spy),
    FlameprofError when the process is gone or may not be traced. The process is left as it was
    in every case.
    """
    reason = unavailable() or _traced_by(target.pid)
    if reason:
        raise InjectUnavailable(reason)
    request = {
        "pid": target.pid,
        "tid": target.pid,
        "addresses": resolve(target.pid),
        "payload": payload.decode("ascii"),
        "timeout": CALL_TIMEOUT,
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "flameprof.collect.attach.injector_process"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=HELPER_TIMEOUT,
            start_new_session=True,  # a Ctrl-C meant for flameprof must not reach it half way
        )
    except subprocess.TimeoutExpired:
        raise InjectUnavailable(f"the injector did not finish within {HELPER_TIMEOUT:.0f} s") from None
    try:
        outcome = json.loads(proc.stdout)
    except ValueError:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        raise InjectUnavailable(f"the injector failed ({last[0].strip()[:160]})") from None
    status, detail = outcome["status"], outcome["detail"]
    if status == "queued":
        return
    if status == "gone" or not alive(target.pid):
        raise FlameprofError(f"no such process: {target.pid} (it exited)")
    if status == "denied":
        raise FlameprofError(explain_ptrace_failure(target.pid, target.uid))
    if status == "self-test":
        raise InjectUnavailable(f"injection failed its check on a throwaway process here ({detail})")
    raise InjectUnavailable(
        _MESSAGES.get(status) or f"could not inject ({detail}); the process was left as it was"
    )


def _traced_by(pid: int) -> str | None:
    """Why another tracer (a debugger, strace) rules ptrace out for ``pid`` now, or None."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as fh:
            tracer = next((line.split()[1] for line in fh if line.startswith("TracerPid:")), "0")
    except OSError:
        return None  # gone: the injection says so
    return None if tracer == "0" else f"the process is being traced by process {tracer} (a debugger?)"


def try_inject(target: TargetProcess, payload: bytes) -> str | None:
    """Inject into a child process; what went wrong, or None."""
    try:
        inject(target, payload)
    except FlameprofError as exc:
        return str(exc)
    return None


def try_inject_late(target: TargetProcess, payload: bytes) -> str | None:
    """As ``try_inject``, for a child that appeared during the attach (RETRY: it is still starting)."""
    failure = try_inject(target, payload)
    return RETRY if failure == _MESSAGES["not-initialized"] else failure
