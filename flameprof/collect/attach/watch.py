"""``flameprof attach --subprocesses``: the Python processes that appear below the target during the
attach and that no followed fork covers (spawned or forkserver DataLoader workers, subprocesses).

A child forked by a profiled process profiles itself (see ``agent.py``) and writes its part into
the channel at its first tick. A new descendant that runs another command line than its parent's
(it ``exec``-ed), or that wrote no part within ``FORK_GRACE``, is injected like the children
found at the start: in the background, so the attach never waits on the injector (its process's
start, about 0.1 s, then the agent's start), which makes it miss the first moments of such a
child's life.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..jobs.parts import SUFFIX, part_files
from ..process_alive import alive
from .target import TargetProcess, descendants, profilable, runs_parents_program, sees_paths

WATCH_INTERVAL = 0.1  # seconds between looks at the process tree (about 1 ms each)
FORK_GRACE = 0.3  # a followed fork has written its part by then
START_RETRIES = 25  # looks at a child whose interpreter is still starting up before giving up
RETRY = "retry"  # what ``inject`` returns when the child's interpreter is not running yet


def part_pid(path: str) -> int | None:
    """The pid of the process that wrote the part ``path`` (``part-<host>-<pid>.flameprof``)."""
    pid = os.path.basename(path)[: -len(SUFFIX)].rpartition("-")[2]
    return int(pid) if pid.isdigit() else None


class ChildWatcher:
    """Injects ``inject(child)`` (None, a failure, or RETRY) into each new unfollowed Python descendant.

    ``admit(child)`` is called before the injection, so the child's agent is let in when it connects.
    """

    def __init__(
        self,
        root: int,
        known: set[int],
        channel: str,
        paths: tuple[str, ...],
        inject: Callable[[TargetProcess], str | None],
        admit: Callable[[TargetProcess], None],
        note: Callable[[str], None],
    ) -> None:
        self.root = root
        self.done = set(known)  # injected, followed, or given up
        self.queued: set[int] = set()  # injected: the agent's bootstrap is queued in them
        self.channel = channel
        self.paths = paths
        self.inject = inject
        self.admit = admit
        self.note = note
        self.first_seen: dict[int, float] = {}
        self.tries: dict[int, int] = {}
        self.running: dict[int, tuple[TargetProcess, Future]] = {}
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.next_look = 0.0

    def poll(self) -> None:
        """Look at the tree if it is time, and take in the injections that finished."""
        for pid, (child, future) in list(self.running.items()):
            if future.done():
                del self.running[pid]
                self._finished(child, future.result())
        now = time.monotonic()
        if now < self.next_look:
            return
        self.next_look = now + WATCH_INTERVAL
        followed = {part_pid(path) for path in part_files(self.channel)}
        for pid in descendants(self.root):
            if pid in self.done or pid in self.running:
                continue
            if pid in followed:
                self.done.add(pid)
            elif now - self.first_seen.setdefault(pid, now) >= FORK_GRACE or not runs_parents_program(pid):
                self._start(pid)

    def _start(self, pid: int) -> None:
        child = profilable(pid, self.note)
        if child is None:
            self.done.add(pid)
        elif not sees_paths(pid, self.paths):
            self.done.add(pid)
            if alive(pid):
                self.note(
                    f"leaving out child process {pid}: it sees other files (a container, or a private /tmp)"
                )
        else:
            self.admit(child)
            self.running[pid] = (child, self.pool.submit(self.inject, child))

    def _finished(self, child: TargetProcess, failure: str | None) -> None:
        tries = self.tries[child.pid] = self.tries.get(child.pid, 0) + 1
        if failure == RETRY and tries < START_RETRIES and alive(child.pid):
            return  # looked at again at the next look
        self.done.add(child.pid)
        if failure is None:
            self.queued.add(child.pid)
        elif alive(child.pid):
            self.note(
                f"leaving out child process {child.pid}: "
                + ("its interpreter did not start" if failure == RETRY else failure)
            )

    def close(self) -> None:
        """Let the injections under way finish (the agents they start end at the channel's end of file)."""
        self.pool.shutdown(wait=True)
        for child, future in self.running.values():
            self._finished(child, future.result())
        self.running.clear()
