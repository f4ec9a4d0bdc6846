"""Runs any command as a child process, passing its outcome through: exit code, or the signal that ended it.

Signals reach the child as if flameprof were not there. With a terminal, the child stays in
flameprof's process group, which holds the terminal: Ctrl-C and Ctrl-\\ reach it by themselves,
so only the signals no terminal sends are forwarded. Without one (a batch job, CI, nohup), the
child gets a process group of its own, so a signal sent to flameprof's group reaches flameprof
alone and is forwarded once. When flameprof is killed the child is killed too (the parent-death
signal), and the parts written so far stay in the output directory.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

from ...errors import FlameprofError

TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)  # the keyboard's: sent to the foreground group
FORWARDED = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    *TERMINAL_SIGNALS,
)
_PR_SET_PDEATHSIG = 1


def _in_foreground() -> bool:
    """Whether this process's group holds its controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _child_setup(own_group: bool, ignored_here: Sequence[int]):
    """The child's set-up between fork and exec: killed when flameprof dies, maybe in its own group,
    and the signals that flameprof ignores for the child's sake back to their default action (an
    ignored signal stays ignored across exec)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if own_group:
            os.setpgid(0, 0)
        for signum in ignored_here:
            signal.signal(signum, signal.SIG_DFL)

    return setup


def run_command(
    argv: list[str], env: dict, every: float | None = None, tick: Callable[[int], None] | None = None
) -> tuple[int, int]:
    """Run ``argv`` with ``env`` to its end: (pid, returncode), negative when a signal ended it;
    ``tick(pid)`` runs every ``every`` seconds meanwhile."""
    terminal = _in_foreground()
    # a signal ignored here (a shell's background job ignores Ctrl-C) stays ignored, in the child too
    forwarded = [
        s
        for s in FORWARDED
        if signal.getsignal(s) != signal.SIG_IGN and not (terminal and s in TERMINAL_SIGNALS)
    ]
    pending: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum: int, frame: object) -> None:
        if child is None:
            pending.append(signum)  # arrived while the child was starting
            return
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    ignored_here = []
    if terminal:
        for sig in TERMINAL_SIGNALS:
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
            if previous[sig] != signal.SIG_IGN:
                ignored_here.append(sig)  # for this process only
    try:
        try:
            setup = _child_setup(own_group=not terminal, ignored_here=ignored_here)
            child = subprocess.Popen(argv, env=env, preexec_fn=setup)
        except FileNotFoundError:
            raise FlameprofError(f"command not found: {argv[0]}") from None
        except PermissionError:
            raise FlameprofError(f"cannot execute {argv[0]}: permission denied") from None
        except OSError as exc:
            raise FlameprofError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        for signum in pending:
            forward(signum, None)
        returncode = None
        while returncode is None:
            try:
                returncode = child.wait(every)
            except subprocess.TimeoutExpired:
                if tick is not None:
                    tick(child.pid)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return child.pid, returncode


def exit_like(returncode: int) -> int:
    """End this process as the child ended: by the same signal, or return the exit code to use."""
    if returncode < 0:
        signum = -returncode
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their action: nothing to reset
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        return 128 + signum  # the signal is ignored here (SIGCHLD, SIGWINCH): report it as a shell would
    return returncode
