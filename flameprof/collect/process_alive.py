"""Whether a process still runs, by pid: the one answer attach, ``run``'s part merging and its
watcher share. Standard library only: ``run``'s children import it."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie has ended: it only waits to be reaped)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        # the command name may hold spaces and parentheses: the state follows the last ")"
        return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")
    except OSError:
        if os.path.isdir("/proc"):
            return False
    try:  # no /proc (not Linux): signal 0 says whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, and belongs to another user
        return True
    return True
