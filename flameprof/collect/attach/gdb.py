"""Run gdb against the target once: it executes ``gdb_program.py`` there, which queues the bootstrap.

The program and the payload travel in gdb's environment, never on its command line or in a file,
so nothing needs quoting for gdb and nothing can be swapped under it.
"""

from __future__ import annotations

import os
import subprocess

from ...errors import FlameprofError, InjectUnavailable
from .target import TargetProcess, alive, explain_ptrace_failure
from .watch import RETRY

GDB_TIMEOUT = 60.0
GDB_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gdb_program.py")

_GDB_ERRORS = {
    "no-python-api": "the process exports no Python C API to gdb (a stripped or unusual Python build)",
    "not-initialized": "the Python interpreter in the process is not running (starting up or shutting down)",
    "mmap": "could not map memory in the process",
    "pending-call-queue-full": "the interpreter's pending-call queue is full",
}


def run_gdb(gdb: str, target: TargetProcess, payload: bytes) -> None:
    # The script and the payload travel in gdb's environment: no file that the target's user could
    # swap (the channel directory is theirs when root attaches) is ever read by gdb.
    # The process is stopped while gdb is attached, so gdb reads as little as it can: no debug info
    # (the script casts every function it calls), no shared library symbols but libc's and
    # libpython's, no libthread_db, no debuginfod downloads.
    cmd = [
        gdb,
        "-q",
        "-batch",
        "-nx",
        "--readnever",
        "-iex",
        "set auto-load off",
        "-iex",
        "set auto-solib-add off",
        "-iex",
        "set libthread-db-search-path",
        "-iex",
        "set debuginfod enabled off",
        "-iex",
        "set confirm off",
        "-p",
        str(target.pid),
        "-ex",
        "python exec(__import__('os').environ['FLAMEPROF_ATTACH_SCRIPT'])",
    ]
    env = dict(
        os.environ, FLAMEPROF_ATTACH_SCRIPT=_program(), FLAMEPROF_ATTACH_PAYLOAD=payload.decode("ascii")
    )
    # Its own session: a Ctrl-C meant for flameprof must not interrupt gdb inside the target.
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=GDB_TIMEOUT)
    except KeyboardInterrupt:
        proc.communicate(timeout=GDB_TIMEOUT)  # let gdb finish and detach, then stop
        raise
    except subprocess.TimeoutExpired:
        proc.terminate()  # gdb detaches from the target when terminated
        proc.communicate()
        raise InjectUnavailable(f"gdb did not finish attaching within {GDB_TIMEOUT:.0f} s") from None
    if "FLAMEPROF-QUEUED" in output:
        return
    if "ptrace: No such process" in output or not alive(target.pid):
        raise FlameprofError(f"no such process: {target.pid} (it exited)")
    if "ptrace: Operation not permitted" in output:
        raise FlameprofError(explain_ptrace_failure(target.pid, target.uid))
    for key, message in _GDB_ERRORS.items():
        if f"FLAMEPROF-ERROR: {key}" in output:
            raise InjectUnavailable(message)
    last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
    raise InjectUnavailable(f"gdb could not inject into the process ({last[0].strip()[:160]})")


def try_gdb(gdb: str, target: TargetProcess, payload: bytes) -> str | None:
    """Inject into a child process; what went wrong, or None."""
    try:
        run_gdb(gdb, target, payload)
    except FlameprofError as exc:
        return str(exc)
    return None


def try_gdb_late(gdb: str, target: TargetProcess, payload: bytes) -> str | None:
    """As ``try_gdb``, for a child that appeared during the attach (RETRY: it is still starting)."""
    failure = try_gdb(gdb, target, payload)
    return RETRY if failure == _GDB_ERRORS["not-initialized"] else failure


def _program() -> str:
    with open(GDB_PROGRAM, encoding="utf-8") as fh:
        return fh.read()
