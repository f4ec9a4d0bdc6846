"""``flameprof attach``'s inject backend: run flameprof's own sampler inside a live CPython process.

How (the CLI side; ``attach_agent`` is the side inside the target):

1. A private channel: a fresh 0700 directory (owned by the target's user) holding a unix socket
   the CLI listens on. Only that user and root can reach it; the CLI checks the peer's pid.
2. gdb attaches, maps one anonymous page in the target (``mmap``, a bare system call: no malloc
   lock is taken while the target is stopped at an arbitrary instruction), writes the bootstrap
   source into it and queues ``PyRun_SimpleString(page)`` with ``Py_AddPendingCall``, then
   detaches. gdb runs nothing else in the target. The interpreter runs pending calls in the main
   thread between bytecodes, so the bootstrap starts at a safe point; it only starts the agent
   thread, catching everything, and binds no name in ``__main__``. The page (4 KiB) stays mapped.
3. The agent connects, samples, writes its part file (``parts.py``, mode 0600) into the channel
   every few seconds and a last time on "stop" (or when the CLI disappears, or at the target's
   exit).
4. The CLI loads the part with ``storage.loads`` (zip of JSON and ``.npy`` without pickle) from a
   file opened without following symlinks; nothing the target writes is ever executed.

Paths are put into the bootstrap with ``ascii()``, which yields a Python literal that evaluates to
the same string whatever it contains, so no path can inject code.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..errors import FlameprofError
from .attach_agent import FLUSH_INTERVAL, MAX_LINE, SOCKET_NAME
from .parts import part_files
from .target_process import TargetProcess, alive, explain_ptrace_failure

if TYPE_CHECKING:
    from ..model import Profile

GDB_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0   # the main thread must reach a safe point (run a bytecode) within this
START_TIMEOUT = 60.0     # the agent imports flameprof in the target
SAVE_TIMEOUT = 60.0
BOOTSTRAP_ERROR = "bootstrap-error.txt"

# Runs inside gdb's Python. The payload path comes from the environment, never from gdb's
# command line, so nothing needs quoting for gdb.
GDB_SCRIPT = r'''
import os
import gdb

def flameprof_inject():
    with open(os.environ["FLAMEPROF_ATTACH_PAYLOAD"], "rb") as fh:
        data = fh.read() + b"\0"
    for lib in ("libc", "libpython"):
        gdb.execute("sharedlibrary " + lib, to_string=True)
    try:
        gdb.parse_and_eval("Py_AddPendingCall")
        gdb.parse_and_eval("PyRun_SimpleString")
    except gdb.error:
        print("FLAMEPROF-ERROR: no-python-api")
        return
    if int(gdb.parse_and_eval("((int (*)(void))Py_IsInitialized)()")) == 0:
        print("FLAMEPROF-ERROR: not-initialized")
        return
    size = (len(data) + 4095) // 4096 * 4096
    addr = int(gdb.parse_and_eval("(long)((void *(*)(void *, unsigned long, int, int, int, long))mmap)"
                                  "(0, %d, 3, 0x22, -1, 0)" % size))
    if addr == -1 or addr == 0:
        print("FLAMEPROF-ERROR: mmap")
        return
    gdb.selected_inferior().write_memory(addr, data)
    rc = int(gdb.parse_and_eval("((int (*)(void *, void *))Py_AddPendingCall)"
                                "((void *)PyRun_SimpleString, (void *)%d)" % addr))
    print("FLAMEPROF-QUEUED" if rc == 0 else "FLAMEPROF-ERROR: pending-call-queue-full")

flameprof_inject()
'''

_GDB_ERRORS = {
    "no-python-api": "the process exports no Python C API to gdb (a stripped or unusual Python build)",
    "not-initialized": "the Python interpreter in the process is not running (starting up or shutting down)",
    "mmap": "could not map memory in the process",
    "pending-call-queue-full": "the interpreter's pending-call queue is full",
}


class InjectUnavailable(FlameprofError):
    """Injection is impossible for this process; the caller may fall back to py-spy."""


def bootstrap_source(channel: str, package_dir: str) -> bytes:
    """The code run in the target's main thread: start the agent thread, and nothing else.

    flameprof is imported from ``package_dir`` without touching the target's ``sys.path``, unless
    the target already imported flameprof (then its copy and its running Profilers are shared).
    """
    body = (
        "import sys\n"
        "try:\n"
        "    if 'flameprof' not in sys.modules:\n"
        "        import importlib.util\n"
        f"        spec = importlib.util.spec_from_file_location('flameprof', {ascii(os.path.join(package_dir, '__init__.py'))},"
        f" submodule_search_locations=[{ascii(package_dir)}])\n"
        "        module = importlib.util.module_from_spec(spec)\n"
        "        sys.modules['flameprof'] = module\n"
        "        spec.loader.exec_module(module)\n"
        "    from flameprof.collect.attach_agent import serve\n"
        "except BaseException as exc:\n"
        "    try:\n"
        f"        with open({ascii(os.path.join(channel, BOOTSTRAP_ERROR))}, 'w') as fh:\n"
        "            fh.write(f'{type(exc).__name__}: {exc}'[:300])\n"
        "    except BaseException:\n"
        "        pass\n"
        "else:\n"
        f"    serve({ascii(channel)})\n"
    )
    code = (
        "try:\n"
        f"    __import__('threading').Thread(target=exec, args=(compile({ascii(body)}, '<flameprof attach>', 'exec'),"
        " {}), name='flameprof-attach', daemon=True).start()\n"
        "except BaseException:\n"
        "    pass\n"
    )
    data = code.encode("ascii")
    assert b"\0" not in data
    return data


class Channel:
    """The private directory and listening socket shared with one target."""

    def __init__(self, target: TargetProcess) -> None:
        self.target = target
        base = tempfile.gettempdir()
        if len(base) > 60:  # a unix socket path must fit in 108 bytes
            base = "/tmp"
        self.path = tempfile.mkdtemp(prefix="flameprof-attach-", dir=base)  # mode 0700
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.server.bind(os.path.join(self.path, SOCKET_NAME))
            self.server.listen(1)
            if target.uid != os.geteuid():  # root attaching to another user's process
                os.chown(self.path, target.uid, -1)
                os.chown(os.path.join(self.path, SOCKET_NAME), target.uid, -1)
        except OSError as exc:
            self.close()
            raise FlameprofError(f"cannot create the attach channel in {base}: {exc.strerror or exc}") from None

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def accept(self, timeout: float) -> socket.socket | None:
        """The target's connection, or None if it does not connect within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.server], [], [], left)[0]:
                return None
            conn, _ = self.server.accept()
            if _peer_pid(conn) == self.target.pid:
                return conn
            conn.close()  # someone else (same user) found the socket: ignore it

    def read_private(self, name: str, limit: int) -> bytes | None:
        """A file the target wrote into the channel, opened without following links."""
        try:
            fd = os.open(self.file(name), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit)

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "Channel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _peer_pid(conn: socket.socket) -> int:
    pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
    return pid


class _Events:
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
            chunk = self.conn.recv(4096)
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


def _run_gdb(gdb: str, target: TargetProcess, channel: Channel) -> None:
    script, payload = channel.file("inject.gdb.py"), channel.file("bootstrap.py")
    for path, data in ((script, GDB_SCRIPT.encode()), (payload, bootstrap_source(channel.path, _package_dir()))):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    cmd = [gdb, "-q", "-batch", "-nx", "-iex", "set auto-load off", "-iex", "set auto-solib-add off",
           "-iex", "set confirm off", "-p", str(target.pid), "-x", script]
    env = dict(os.environ, FLAMEPROF_ATTACH_PAYLOAD=payload)
    # Its own session: a Ctrl-C meant for flameprof must not interrupt gdb inside the target.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", env=env, start_new_session=True)
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


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(target: TargetProcess, duration: float | None, rate: float, mode: str = "wall",
           note: Callable[[str], None] = lambda text: None) -> "Profile":
    """Profile ``target`` for ``duration`` seconds (None: until Ctrl-C) with the injected agent.

    Raises InjectUnavailable when injection cannot work here (the caller may use py-spy instead),
    FlameprofError for everything else.
    """
    gdb = shutil.which("gdb")
    if gdb is None:
        raise InjectUnavailable("gdb is not installed (e.g. apt install gdb)")
    with Channel(target) as channel:
        _run_gdb(gdb, target, channel)
        conn = channel.accept(CONNECT_TIMEOUT)
        if conn is None:
            failure = channel.read_private(BOOTSTRAP_ERROR, 300)
            if failure:
                raise InjectUnavailable("the agent failed to load in the process: "
                                        + failure.decode("utf-8", "replace").strip())
            if not alive(target.pid):
                raise FlameprofError(f"process {target.pid} exited before profiling started")
            raise InjectUnavailable(f"the process's main thread ran no Python code for {CONNECT_TIMEOUT:.0f} s "
                                    "(blocked in a long call), so the agent could not start")
        with conn:
            conn.sendall((json.dumps({"rate": rate, "mode": mode}) + "\n").encode())
            events = _Events(conn)
            started = events.next(START_TIMEOUT) or {}
            if started.get("event") == "error":
                raise InjectUnavailable(str(started.get("message", "the agent failed"))[:300])
            if started.get("event") != "started":
                if not alive(target.pid):
                    raise FlameprofError(f"process {target.pid} exited before profiling started")
                raise FlameprofError(f"the agent in process {target.pid} did not start")
            note(f"profiling process {target.pid} (Python {target.version_text}) "
                 + (f"for {duration:g} s" if duration else "until Ctrl-C"))
            saved = _wait(events, duration)
            if saved is None:
                try:
                    conn.sendall(b"stop\n")
                except OSError:
                    pass
                saved = _next_of(events, SAVE_TIMEOUT)
        if saved is not None and saved.get("event") == "error":
            raise FlameprofError(str(saved.get("message", "the agent failed"))[:300])
        if saved is not None and saved.get("event") == "saved":
            if saved.get("reason") == "exit":
                note(f"process {target.pid} exited during the attach; saved the samples taken so far")
            return _load(channel, target)
        if alive(target.pid):
            raise FlameprofError(f"the agent in process {target.pid} did not hand back a profile")
        profile = _load(channel, target, missing=f"process {target.pid} exited before its profile could be saved")
        note(f"process {target.pid} ended abruptly during the attach; saved the samples up to its last "
             f"flush (every {FLUSH_INTERVAL:g} s)")
        return profile


def _next_of(events: _Events, timeout: float) -> dict | None:
    """The next meaningful event within ``timeout`` (None when the connection ends)."""
    deadline = time.monotonic() + timeout
    while True:
        event = events.next(max(0.0, deadline - time.monotonic()))
        if event is None or event.get("event") in ("saved", "error"):
            return event


def _wait(events: _Events, duration: float | None) -> dict | None:
    """Wait out the duration (or Ctrl-C); an event that arrives first (the target exited) wins."""
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while deadline is None or time.monotonic() < deadline:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            event = events.next(left)
            if event is None and events.closed:
                return {}
            if event and event.get("event") in ("saved", "error"):
                return event
    except KeyboardInterrupt:
        pass
    return None


def _load(channel: Channel, target: TargetProcess, missing: str = "") -> "Profile":
    """The part the agent wrote, without the agent's own thread (idle in a read)."""
    from .. import storage

    name = f"-{target.pid}.flameprof"
    paths = [p for p in part_files(channel.path) if p.endswith(name)]
    data = channel.read_private(os.path.basename(paths[0]), 1 << 31) if paths else None
    if not data:
        raise FlameprofError(missing or f"the agent in process {target.pid} wrote no profile")
    profile = storage.loads(data, f"profile from process {target.pid}")
    agent_tid = profile.meta.pop("agent_tid", None)
    if isinstance(agent_tid, int):
        profile = _without_thread(profile, target.pid, agent_tid)
    profile.meta.update(collector="attach", backend="inject")
    return profile


def _without_thread(profile: "Profile", pid: int, tid: int) -> "Profile":
    """``profile`` without the samples and the entry of thread ``(pid, tid)``."""
    import numpy as np

    drop = [i for i, t in enumerate(profile.threads) if t.pid == pid and t.tid == tid]
    if not drop:
        return profile
    index = drop[0]
    keep = profile.sample_thread != index
    for name in ("sample_time", "sample_thread", "sample_stack", "sample_wall", "sample_cpu"):
        setattr(profile, name, getattr(profile, name)[keep])
    remap = np.arange(len(profile.threads)) - (np.arange(len(profile.threads)) > index)
    profile.sample_thread = remap[profile.sample_thread].astype(np.int32)
    profile.threads = [t for i, t in enumerate(profile.threads) if i != index]
    profile.marks = [replace(m, thread=int(remap[m.thread])) for m in profile.marks if m.thread != index]
    return profile
