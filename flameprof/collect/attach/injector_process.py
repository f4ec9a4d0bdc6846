"""The injector's own process: proves injection on a throwaway process, then injects into the target.

``ptrace_injector.py`` runs this module as a process of its own, in a session of its own and deaf
to the signals that end a program (SIGINT, SIGTERM, SIGHUP, SIGQUIT): while the target's thread is
borrowed, nothing aimed at flameprof can end the borrowing half way. The request comes as one JSON
object on stdin, the answer goes out as one on stdout.

Before the target is touched, the same injection runs on a throwaway fork of this process, blocked
in a ``read`` of a pipe: the fork must see its read return what was written, run the queued code,
and exit cleanly, and the injector must have restored and read back the fork's whole register
state. Only then is the target stopped, so a host whose kernel or CPU the injector does not handle
costs a throwaway process, never the program.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

from .elf_symbols import resolve

_SELF_TEST_WAIT = 2.0


def inject(pid: int, tid: int, addresses: dict[str, int], payload: bytes, **options) -> dict:
    """One injection through ``flameprof._inject``, its outcome as a dict (see ``native/inject.c``)."""
    from ... import _inject

    return _inject.inject(
        pid,
        tid,
        addresses["__errno_location"],
        addresses["Py_IsInitialized"],
        addresses["mmap"],
        addresses["Py_AddPendingCall"],
        addresses["PyRun_SimpleString"],
        payload,
        **options,
    )


def self_test() -> str | None:
    """Inject into a throwaway fork blocked in ``read``; why that failed, or None."""
    request_r, request_w = os.pipe()
    answer_r, answer_w = os.pipe()
    child = os.fork()
    if child == 0:  # the throwaway: its read must return exactly what was written, then run the code
        status = 3
        try:
            os.close(request_w)
            os.close(answer_r)
            data = os.read(request_r, 2)
            status = 0 if data == b"go" else 4
            deadline = time.monotonic() + _SELF_TEST_WAIT
            while not getattr(sys, "_flameprof_self_test", 0) and time.monotonic() < deadline:
                time.sleep(0.0005)  # bytecodes, where the queued code runs
        finally:
            os._exit(status)
    os.close(request_r)
    os.close(answer_w)
    try:
        if not _wait_blocked(child):
            return "the throwaway process did not block in read"
        payload = f"import os, sys; os.write({answer_w}, b'ran'); sys._flameprof_self_test = 1".encode()
        outcome = inject(child, child, resolve(child), payload)
        os.write(request_w, b"go")
        ran = select.select([answer_r], [], [], _SELF_TEST_WAIT)[0] and os.read(answer_r, 3) == b"ran"
        os.close(request_w)
        _, status = os.waitpid(child, 0)
        child = 0
        if outcome["status"] != "queued":
            return f"{outcome['status']}: {outcome['detail']}"
        if not outcome["verified"]:
            return "the registers read back differ from the saved ones"
        if outcome["syscall"] != "restarted":
            return f"the interrupted read was not restarted ({outcome['syscall']})"
        if not ran or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return "the throwaway process did not run on unharmed"
        return None
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)


def _wait_blocked(pid: int) -> bool:
    """Whether ``pid`` sleeps in the ``read`` system call (0 on x86-64) within a second."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/syscall") as fh:
                if fh.read().split()[0] == "0":
                    return True
        except (OSError, IndexError):
            pass
        time.sleep(0.002)
    return False


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    request = json.loads(sys.stdin.read())
    failure = self_test()
    if failure:
        answer = {"status": "self-test", "detail": failure}
    else:
        answer = inject(
            request["pid"],
            request["tid"],
            request["addresses"],
            request["payload"].encode("ascii"),
            timeout=request["timeout"],
            fail_at=request.get("fail_at", 0),
        )
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
