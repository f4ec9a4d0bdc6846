"""Runs any command as a child process, passing its outcome through: exit code, or the signal that ended it.

The terminal sends Ctrl-C to the whole foreground process group, so the child gets SIGINT by
itself and the parent ignores it while it waits; SIGTERM, SIGHUP and SIGQUIT sent to the parent
are forwarded to the child.
"""

from __future__ import annotations

import os
import signal
import subprocess

from ...errors import FlameprofError

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def run_command(argv: list[str], env: dict) -> tuple[int, int]:
    """Run ``argv`` with ``env`` until it ends; returns (pid, returncode) (negative: killed by that signal)."""
    try:
        child = subprocess.Popen(argv, env=env)
    except FileNotFoundError:
        raise FlameprofError(f"command not found: {argv[0]}") from None
    except PermissionError:
        raise FlameprofError(f"cannot execute {argv[0]}: permission denied") from None
    except OSError as exc:
        raise FlameprofError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None

    def forward(signum: int, frame: object) -> None:
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return child.pid, returncode


def exit_like(returncode: int) -> int:
    """End this process as the child ended: by the same signal, or return the exit code to use."""
    if returncode < 0:
        signum = -returncode
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum  # the signal is ignored or blocked here: report it as a shell would
    return returncode
