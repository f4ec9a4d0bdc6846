"""The CLI's end of the attach channel: a private directory with a unix socket, and the JSON-lines
conversation with each attached process's agent.

The directory is fresh, mode 0700 and owned by the target's user: only that user and root can
reach the socket, and the CLI checks each peer's pid (the target's, or with ``--subprocesses`` one
of its Python descendants'). Files the agents write there are read without following links.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import stat
import struct
import tempfile
import time
from collections.abc import Callable

from ...errors import FlameprofError
from ..process_alive import alive
from .agent import MAX_LINE, SOCKET_NAME
from .target import TargetProcess


class Channel:
    """The private directory and listening socket shared with the processes being attached."""

    def __init__(self, targets: list[TargetProcess]) -> None:
        self.pids = {t.pid for t in targets}
        self.accepted: set[int] = set()
        base = tempfile.gettempdir()
        if len(base) > 60:  # a unix socket path must fit in 108 bytes
            base = "/tmp"
        self.path = tempfile.mkdtemp(prefix="flameprof-attach-", dir=base)  # mode 0700
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.server.bind(os.path.join(self.path, SOCKET_NAME))
            self.server.listen(64)
            if targets[0].uid != os.geteuid():  # root attaching to another user's process
                os.chown(self.path, targets[0].uid, -1)
                os.chown(os.path.join(self.path, SOCKET_NAME), targets[0].uid, -1)
        except OSError as exc:
            self.close()
            raise FlameprofError(
                f"cannot create the attach channel in {base}: {exc.strerror or exc}"
            ) from None

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def accept(self, timeout: float) -> tuple[int, socket.socket] | None:
        """(pid, connection) of the next attached process to connect, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if not select.select([self.server], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            conn, _ = self.server.accept()
            pid = _peer_pid(conn)
            if pid in self.pids and pid not in self.accepted:
                self.accepted.add(pid)
                return pid, conn
            conn.close()  # someone else (same user) found the socket: ignore it

    def read_private(self, name: str, limit: int) -> bytes | None:
        """A file a target wrote into the channel, opened without following links."""
        try:  # no link, and no FIFO or device that would block or never end
            fd = os.open(self.file(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _peer_pid(conn: socket.socket) -> int:
    pid, _uid, _gid = struct.unpack(
        "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    return pid


class Events:
    """JSON lines from the agent; anything that is not a small JSON object is ignored."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""
        self.closed = False

    def next(self, timeout: float | None) -> dict | None:
        """The next event, or None on timeout or when the agent closed the connection."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.conn], [], [], left)[0]:
                return None
            try:
                chunk = self.conn.recv(4096)
            except OSError:  # reset: the process ended with a line from the CLI unread
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE and b"\n" not in self.buffer:
                raise FlameprofError("the attached process sent a malformed message")
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            event = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return {}
        return event if isinstance(event, dict) else {}


class Remote:
    """The CLI's end of one process's agent: its connection and how it ended."""

    def __init__(self, target: TargetProcess, conn: socket.socket, main: bool) -> None:
        self.target = target
        self.conn = conn
        self.main = main
        self.events = Events(conn)
        self.result: dict | None = None  # the "saved" or "error" event; {} when the connection ended

    def pump(self, timeout: float | None) -> dict | None:
        """Read what the agent sent within ``timeout``; sets ``result`` when it finished."""
        event = self.events.next(timeout)
        if event is None:
            if self.events.closed and self.result is None:
                self.result = {}
        elif event.get("event") in ("saved", "error"):
            self.result = event
        return event

    def settle_if_gone(self) -> None:
        """Set ``result`` when the process is gone without one. The end of file may never come: a
        child forked while the agent ran holds a copy of the connection."""
        if self.result is None and not alive(self.target.pid):
            while self.result is None and self.pump(0) is not None:  # what it sent before it ended
                pass
            if self.result is None:
                self.result = {}

    def fail(self, message: str, note: Callable[[str], None], error: type = FlameprofError) -> None:
        """The main process's problem ends the attach; a child's is noted and the child left out."""
        if self.main:
            raise error(message)
        note(f"leaving out child process {self.target.pid}: {message}")
