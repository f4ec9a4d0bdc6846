"""Writes a ``run``'s outputs when the profiled process ended without writing them: killed by a
signal (SIGKILL included) that the program did not handle; and, while the program runs, the
periodic work done outside it: ``--snapshot-every``'s snapshots and ``--live``'s lines.

``run`` profiles the program in its own process, so the program's signals keep their default
actions and end it exactly as they would without flameprof. That process flushes its samples to a
part every second or so (collect/jobs/child.py); this watcher, forked before the program starts
and detached from it (its own session, not the program's child), waits for the process to end,
and unless ``run`` finished the profile itself, merges the parts left behind (the process's own
and its children's) into the usual outputs. Snapshots are made here too, outside the program:
every ``snapshot_every`` seconds the parts as they are are merged into ``profile.snapshot.flameprof``
(written atomically, so a job killed at any moment leaves the last one whole), and with ``--live``
one line a second on stderr: the last steps' step time and phase shares (render/live_view.py).
"""

from __future__ import annotations

import os
import select
import sys
import time

from ..collect.jobs.tree import ProcessTree
from ..collect.process_alive import alive

FINISHING = "finishing"  # a file in the parts directory: run writes the outputs itself
SNAPSHOT = "profile.snapshot.flameprof"
LIVE_INTERVAL = 1.0  # seconds between --live lines (the parts are flushed about every second)


class Ticker:
    """The periodic work of a run, done outside the program: ``interval`` is when to call it next."""

    def __init__(self, parts: str, outdir: str, snapshot_every: float | None, live_steps: int | None) -> None:
        self.parts, self.outdir = parts, outdir
        self.snapshot_every, self.live_steps = snapshot_every, live_steps
        self.interval = LIVE_INTERVAL if live_steps else snapshot_every
        self.started = time.monotonic()
        self.next_snapshot = self.started + snapshot_every if snapshot_every else None

    def __call__(self, main_pid: int) -> None:
        tree = ProcessTree.existing(self.parts)
        if self.live_steps:
            write_live_line(tree, main_pid, self.live_steps, time.monotonic() - self.started)
        if self.next_snapshot is not None and time.monotonic() >= self.next_snapshot - 0.05:
            assert self.snapshot_every is not None  # a next snapshot is due only with a period
            self.next_snapshot += self.snapshot_every
            write_snapshot(tree, self.outdir, main_pid)


def write_live_line(tree: ProcessTree, main_pid: int, steps: int, seconds: float) -> None:
    """One ``--live`` line on stderr from the parts as they are (nothing before the first flush)."""
    from ..render.live_view import live_line  # numpy-backed: never imported in the program's process

    profile = tree.snapshot(main_pid)
    if profile is not None:
        sys.stderr.write(f"flameprof live: {live_line(profile, steps, seconds)}\n")
        sys.stderr.flush()


def start_watcher(pid: int, parts: str, write, ticker: Ticker | None = None) -> None:
    """Fork the watcher of process ``pid`` (this one); ``write(profile)`` writes the outputs there,
    and ``ticker`` does the periodic work (snapshots, live lines) while it runs.

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
        while not _wait_for_exit(pid, ticker.interval if ticker else None):
            assert ticker is not None  # without a ticker the wait lasts until the exit
            ticker(pid)
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


def write_snapshot(tree: ProcessTree, outdir: str, main_pid: int) -> None:
    """The job so far into ``outdir/profile.snapshot.flameprof``; a failed write is one warning line."""
    from ..model import storage  # numpy-backed: never imported in the program's process

    profile = tree.snapshot(main_pid)
    if profile is None:
        return
    try:
        storage.save(profile, os.path.join(outdir, SNAPSHOT))
    except OSError as exc:
        sys.stderr.write(f"flameprof: warning: could not write a snapshot: {exc.strerror or exc}\n")


def _wait_for_exit(pid: int, timeout: float | None) -> bool:
    """Whether ``pid`` ended within ``timeout`` seconds (None: wait for it)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Linux 5.3: look every 0.2 s
        deadline = None if timeout is None else time.monotonic() + timeout
        while alive(pid):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _rescue(pid: int, parts: str, write) -> None:
    profile = ProcessTree.existing(parts).collect(main_pid=pid)
    if profile is None:
        return
    write(profile)
    sys.stderr.flush()
