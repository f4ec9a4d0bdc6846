"""Writes a ``run``'s outputs when the profiled process ended without writing them: killed by a
signal (SIGKILL included) that the program did not handle.

``run`` profiles the program in its own process, so the program's signals keep their default
actions and end it exactly as they would without flameprof. That process flushes its samples to a
part every second or so (collect/jobs/child.py); this watcher, forked before the program starts
and detached from it (its own session, not the program's child), waits for the process to end,
and unless ``run`` finished the profile itself, merges the parts left behind (the process's own
and its children's) into the usual outputs.
"""

from __future__ import annotations

import os
import select
import sys
import time

FINISHING = "finishing"  # a file in the parts directory: run writes the outputs itself


def start_watcher(pid: int, parts: str, write) -> None:
    """Fork the watcher of process ``pid`` (this one); ``write(profile)`` writes the outputs there.

    Called before the program runs and before any thread starts: the watcher is a copy of this
    process, so nothing is imported or exec'd. The intermediate child ends at once, so the program
    never has the watcher as a child (an ``os.wait()`` of its own never sees it).
    """
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    try:
        if os.fork():
            os._exit(0)
        os.setsid()  # out of the program's process group and terminal: its signals are not ours
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        _wait_for_exit(pid)
        if not os.path.exists(os.path.join(parts, FINISHING)) and os.path.isdir(parts):
            _rescue(pid, parts, write)
    except BaseException:
        pass
    finally:
        os._exit(0)


def mark_finishing(parts: str) -> None:
    """Tell the watcher that ``run`` writes the outputs itself."""
    try:
        with open(os.path.join(parts, FINISHING), "w"):
            pass
    except OSError:
        pass


def _wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Linux 5.3: look every 0.2 s
        while _alive(pid):
            time.sleep(0.2)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _rescue(pid: int, parts: str, write) -> None:
    from ..collect.jobs.tree import ProcessTree

    profile = ProcessTree.existing(parts).collect(main_pid=pid)
    if profile is None:
        return
    write(profile)
    sys.stderr.flush()
