"""``flameprof attach``'s inject backend: run flameprof's own sampler inside a live CPython process.

How (the CLI side; ``attach_agent`` is the side inside the target):

1. A private channel: a fresh 0700 directory (owned by the target's user) holding a unix socket
   the CLI listens on. Only that user and root can reach it; the CLI checks each peer's pid
   (the target's, or with ``--subprocesses`` one of its Python descendants').
2. gdb attaches, maps one anonymous page in the target (``mmap``, a bare system call: no malloc
   lock is taken while the target is stopped at an arbitrary instruction), writes the bootstrap
   source into it and queues ``PyRun_SimpleString(page)`` with ``Py_AddPendingCall``, then
   detaches. gdb runs nothing else in the target. The interpreter runs pending calls in the main
   thread between bytecodes, so the bootstrap starts at a safe point; it only starts the agent
   thread, catching everything, and binds no name in ``__main__``. The page (4 KiB) stays mapped.
3. The agent connects, samples, writes its part file (``parts.py``, mode 0600) into the channel
   every few seconds and a last time on "stop" (or when the CLI disappears, or at the target's
   exit).
4. The CLI loads each part with ``storage.loads`` (zip of JSON and ``.npy`` without pickle) from a
   regular file opened without following symlinks, drops the agent's own thread and merges the
   processes by role; nothing a target writes is ever executed.

Paths are put into the bootstrap with ``ascii()``, which yields a Python literal that evaluates to
the same string whatever it contains, so no path can inject code.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from ..errors import FlameprofError
from .engine.sampler_base import ASYNC_SIGNALS
from .attach_agent import DETACH_THREAD, FLUSH_INTERVAL, MAX_LINE, SOCKET_NAME, mark_detached
from .attach_watch import RETRY, WATCH_INTERVAL, ChildWatcher, part_pid
from .jobs.parts import part_files, wait_for_parts
from .target_process import TargetProcess, alive, explain_ptrace_failure, sees_paths

if TYPE_CHECKING:
    from ..model.profile import Profile

GDB_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0   # the main thread must reach a safe point (run a bytecode) within this
START_TIMEOUT = 60.0     # the agent imports flameprof in the target
SAVE_TIMEOUT = 60.0
FOLLOWED_GRACE = 3.0     # seconds for followed children to write their final part after the detach
LIVENESS_INTERVAL = 0.5  # seconds between checks that a process whose agent is silent still runs
BOOTSTRAP_ERROR = "bootstrap-error"

# Runs inside gdb's Python. It and the payload come from gdb's environment, never from its command
# line or from a file, so nothing needs quoting for gdb and nothing can be swapped under it.
GDB_SCRIPT = r'''
import os
import gdb

def flameprof_inject():
    data = os.environ["FLAMEPROF_ATTACH_PAYLOAD"].encode("ascii") + b"\0"
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
    init = ascii(os.path.join(package_dir, "__init__.py"))
    error_file = ascii(os.path.join(channel, BOOTSTRAP_ERROR) + "-")
    body = (
        "import os, signal, sys\n"
        # the program's signals go to the program's threads (see backend.start_without_signals)
        f"signal.pthread_sigmask(signal.SIG_BLOCK, {sorted(int(sig) for sig in ASYNC_SIGNALS)})\n"
        "try:\n"
        "    if 'flameprof' not in sys.modules:\n"
        "        import importlib.util\n"
        f"        spec = importlib.util.spec_from_file_location('flameprof', {init},"
        f" submodule_search_locations=[{ascii(package_dir)}])\n"
        "        module = importlib.util.module_from_spec(spec)\n"
        "        sys.modules['flameprof'] = module\n"
        "        spec.loader.exec_module(module)\n"
        "    from flameprof.collect.attach_agent import serve\n"
        "except BaseException as exc:\n"
        "    try:\n"
        f"        with open({error_file} + str(os.getpid()), 'w') as fh:\n"
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
            raise FlameprofError(f"cannot create the attach channel in {base}: {exc.strerror or exc}") from None

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


def _run_gdb(gdb: str, target: TargetProcess, payload: bytes) -> None:
    # The script and the payload travel in gdb's environment: no file that the target's user could
    # swap (the channel directory is theirs when root attaches) is ever read by gdb.
    # The process is stopped while gdb is attached, so gdb reads as little as it can: no debug info
    # (the script casts every function it calls), no shared library symbols but libc's and
    # libpython's, no libthread_db, no debuginfod downloads.
    cmd = [gdb, "-q", "-batch", "-nx", "--readnever", "-iex", "set auto-load off", "-iex", "set auto-solib-add off",
           "-iex", "set libthread-db-search-path", "-iex", "set debuginfod enabled off", "-iex", "set confirm off",
           "-p", str(target.pid),
           "-ex", "python exec(__import__('os').environ['FLAMEPROF_ATTACH_SCRIPT'])"]
    env = dict(os.environ, FLAMEPROF_ATTACH_SCRIPT=GDB_SCRIPT, FLAMEPROF_ATTACH_PAYLOAD=payload.decode("ascii"))
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


def _try_gdb(gdb: str, target: TargetProcess, payload: bytes) -> str | None:
    """Inject into a child process; what went wrong, or None."""
    try:
        _run_gdb(gdb, target, payload)
    except FlameprofError as exc:
        return str(exc)
    return None


def _try_gdb_late(gdb: str, target: TargetProcess, payload: bytes) -> str | None:
    """As ``_try_gdb``, for a child that appeared during the attach (RETRY: it is still starting)."""
    failure = _try_gdb(gdb, target, payload)
    return RETRY if failure == _GDB_ERRORS["not-initialized"] else failure


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Remote:
    """The CLI's end of one process's agent: its connection and how it ended."""

    def __init__(self, target: TargetProcess, conn: socket.socket, main: bool) -> None:
        self.target = target
        self.conn = conn
        self.main = main
        self.events = _Events(conn)
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


def record(target: TargetProcess, duration: float | None, rate: float,
           note: Callable[[str], None] = lambda text: None, children: list[TargetProcess] = (),
           backward_layers: bool = False, follow_forks: bool = False) -> "Profile":
    """Profile ``target`` (and ``children``) for ``duration`` seconds (None: until Ctrl-C) with the
    injected agent; several processes come back as one merged profile. With ``follow_forks`` the
    children that the profiled processes fork meanwhile are profiled too, and other Python
    processes that appear below ``target`` are injected as they appear.

    Raises InjectUnavailable when injection cannot work for ``target`` (the caller may use py-spy
    instead), FlameprofError for everything else; a child that cannot be profiled is left out.
    """
    gdb = shutil.which("gdb")
    if gdb is None:
        raise InjectUnavailable("gdb is not installed (e.g. apt install gdb)")
    with Channel([target, *children]) as channel:
        paths = (channel.path, _package_dir())
        elsewhere = ("it sees other files (a container, or a private /tmp), without flameprof or the channel "
                     f"directory {channel.path}")
        if not sees_paths(target.pid, paths):
            raise InjectUnavailable(elsewhere)
        known = {target.pid, *(c.pid for c in children)}
        for child in [c for c in children if not sees_paths(c.pid, paths) and alive(c.pid)]:
            note(f"leaving out child process {child.pid}: {elsewhere}")
        children = [c for c in children if sees_paths(c.pid, paths)]
        payload = bootstrap_source(channel.path, _package_dir())
        _run_gdb(gdb, target, payload)
        injected = [target]
        with ThreadPoolExecutor(max_workers=4) as pool:  # a gdb run is mostly waiting on the process
            failures = pool.map(lambda child: _try_gdb(gdb, child, payload), children)
        for child, failure in zip(children, failures):
            if not failure:
                injected.append(child)
            elif alive(child.pid):  # one that ended meanwhile is simply not there
                note(f"leaving out child process {child.pid}: {failure}")
        config = {"rate": rate, "backward_layers": backward_layers, "follow_forks": follow_forks}
        remotes = _start(channel, injected, config)
        by_pid = {t.pid: t for t in injected}

        def admit(child: TargetProcess) -> None:
            channel.pids.add(child.pid)
            by_pid[child.pid] = child

        watcher = ChildWatcher(target.pid, known, channel.path, paths, lambda child: _try_gdb_late(gdb, child, payload),
                               admit, note) if follow_forks else None
        try:
            others = f" and {len(injected) - 1} child process(es)" if len(injected) > 1 else ""
            note(f"profiling process {target.pid}{others} (Python {target.version_text}) "
                 + (f"for {duration:g} s" if duration else "until Ctrl-C"))
            try:
                _wait(channel, remotes, by_pid, config, duration, watcher)
            finally:
                if watcher is not None:
                    watcher.close()
            _stop(remotes)
            for child in injected[1:]:
                if child.pid not in channel.accepted:
                    note(f"leaving out child process {child.pid}: {_not_started(channel, child, 'during the attach')}")
            profiles = [p for p in (_collect(channel, r, note) for r in remotes) if p is not None]
            if follow_forks:
                profiles += _collect_followed(channel, {r.target.pid for r in remotes}, note)
        finally:
            for remote in remotes:
                remote.conn.close()
    if len(profiles) == 1:
        return profiles[0]
    from ..model.merge import merge_profiles

    merged = merge_profiles(profiles, main_pid=target.pid)
    merged.meta.update(collector="attach", backend="inject")
    return merged


def _accept(channel: Channel, by_pid: dict[int, TargetProcess], main_pid: int, config: dict,
            timeout: float) -> _Remote | None:
    """The next agent to connect, configured; None after ``timeout`` seconds."""
    got = channel.accept(timeout)
    if got is None:
        return None
    pid, conn = got
    conn.sendall((json.dumps(dict(config, main=pid == main_pid)) + "\n").encode())
    return _Remote(by_pid[pid], conn, pid == main_pid)


def _start(channel: Channel, injected: list[TargetProcess], config: dict) -> list[_Remote]:
    """Wait for the main process's agent to sample (children that connect meanwhile are kept;
    later ones are accepted while waiting). The main process's remote comes first."""
    main = injected[0]
    by_pid = {t.pid: t for t in injected}
    remotes: list[_Remote] = []
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while not any(r.main for r in remotes):
        remote = _accept(channel, by_pid, main.pid, config, min(0.2, max(0.0, deadline - time.monotonic())))
        if remote is not None:
            remotes.append(remote)
            continue
        failed = channel.read_private(f"{BOOTSTRAP_ERROR}-{main.pid}", 1) or not alive(main.pid)
        if failed or time.monotonic() >= deadline:  # the bootstrap's error or the exit need no more wait
            for other in remotes:
                other.conn.close()  # their agents stop at the end of file
            raise _not_started(channel, main, f"for {CONNECT_TIMEOUT:.0f} s")
    remotes.sort(key=lambda r: not r.main)
    event = remotes[0].events.next(START_TIMEOUT) or {}
    if event.get("event") == "error":
        raise InjectUnavailable(str(event.get("message", "the agent failed"))[:300])
    if event.get("event") != "started":
        if not alive(main.pid):
            raise FlameprofError(f"process {main.pid} exited before profiling started")
        raise FlameprofError(f"the agent in process {main.pid} did not start")
    return remotes


def _not_started(channel: Channel, target: TargetProcess, waited: str) -> FlameprofError:
    """Why the agent of ``target`` never connected, after waiting ``waited``."""
    failure = channel.read_private(f"{BOOTSTRAP_ERROR}-{target.pid}", 300)
    if failure:
        return InjectUnavailable("the agent failed to load in the process: " + failure.decode("utf-8", "replace"))
    if not alive(target.pid):
        return FlameprofError(f"process {target.pid} exited before profiling started")
    return InjectUnavailable(f"the process's main thread ran no Python code {waited} (blocked in a long call), "
                             "so the agent could not start")


def _wait(channel: Channel, remotes: list[_Remote], by_pid: dict[int, TargetProcess], config: dict,
          duration: float | None, watcher: ChildWatcher | None) -> None:
    """Wait out the duration, or Ctrl-C, or the main process's end (its agent then finishes first),
    accepting the agents of children that connect meanwhile, and letting ``watcher`` look for new ones."""
    deadline = None if duration is None else time.monotonic() + duration
    main = remotes[0]
    try:
        while main.result is None and (deadline is None or time.monotonic() < deadline):
            if watcher is not None:
                watcher.poll()
            live = [r for r in remotes if r.result is None]
            waiting = [channel.server] if len(channel.accepted) < len(by_pid) else []
            left = LIVENESS_INTERVAL if deadline is None else max(0.0, min(LIVENESS_INTERVAL, deadline - time.monotonic()))
            if watcher is not None:
                left = min(left, WATCH_INTERVAL)
            ready = select.select([r.conn for r in live] + waiting, [], [], left)[0]
            if channel.server in ready:
                remote = _accept(channel, by_pid, main.target.pid, config, 0)
                if remote is not None:
                    remotes.append(remote)
            for remote in live:
                if remote.conn in ready:
                    remote.pump(0)
            main.settle_if_gone()
    except KeyboardInterrupt:
        pass


def _stop(remotes: list[_Remote]) -> None:
    """Tell every agent still sampling to stop, and wait for each to save."""
    for remote in remotes:
        if remote.result is None:
            try:
                remote.conn.sendall(b"stop\n")
            except OSError:
                pass
    deadline = time.monotonic() + SAVE_TIMEOUT
    for remote in remotes:
        while remote.result is None and time.monotonic() < deadline:
            remote.pump(max(0.0, min(LIVENESS_INTERVAL, deadline - time.monotonic())))
            remote.settle_if_gone()


def _collect(channel: Channel, remote: _Remote, note: Callable[[str], None]) -> "Profile | None":
    """The profile one agent handed back (or, if its process was killed, what it wrote last)."""
    pid = remote.target.pid
    result = remote.result or {}
    if result.get("reason") == "followed":  # its own part is collected with the followed forks
        return None
    if result.get("event") == "saved":
        if result.get("reason") == "exit" and remote.main:  # children come and go
            note(f"process {pid} exited during the attach; saved the samples taken so far")
        return _load(channel, remote.target)
    if result.get("event") == "error":
        message = str(result.get("message", "the agent failed"))[:300]
    elif not _ended(pid):
        message = f"the agent in process {pid} did not hand back a profile"
    else:
        try:
            profile = _load(channel, remote.target, f"process {pid} exited before its profile could be saved")
        except FlameprofError as exc:
            message = str(exc)
        else:
            note(f"process {pid} ended abruptly during the attach; saved the samples up to its last "
                 f"flush (every {FLUSH_INTERVAL:g} s)")
            return profile
    remote.fail(message, note)
    return None


def _ended(pid: int, wait: float = 1.0) -> bool:
    """Whether ``pid`` ended, allowing for a killed process whose sockets are closed before it is a zombie."""
    deadline = time.monotonic() + wait
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _collect_followed(channel: Channel, injected: set[int], note: Callable[[str], None]) -> list["Profile"]:
    """The profiles of the children forked during the attach: each wrote its own part (see
    ``attach_agent``); a child still profiling after the grace keeps what it had written."""
    from ..model import storage

    mark_detached(channel.path)  # the agent did, unless its process ended abruptly
    partial = set(wait_for_parts(channel.path, FOLLOWED_GRACE))
    profiles = []
    for path in part_files(channel.path):
        pid = part_pid(path)
        if pid is None or pid in injected:
            continue
        data = channel.read_private(os.path.basename(path), 1 << 31)
        try:
            profile = storage.loads(data or b"", f"profile from child process {pid}")
        except FlameprofError as exc:
            note(f"leaving out child process {pid}: {exc}")
            continue
        if path in partial:
            note(f"child process {pid} did not finish its profile; kept the {profile.num_samples} samples it had written")
        detach = [t.tid for t in profile.threads if t.pid == pid and t.name == DETACH_THREAD]
        if detach:  # sampled once, as stopping the child's sampler takes a last sample
            profile = profile.without_thread(pid, detach[0])
        if profile.num_samples:
            profile.meta.update(collector="attach", backend="inject")
            profiles.append(profile)
    return profiles


def _load(channel: Channel, target: TargetProcess, missing: str = "") -> "Profile":
    """The part the agent wrote, without the agent's own thread (idle in a read)."""
    from ..model import storage

    name = f"-{target.pid}.flameprof"
    paths = [p for p in part_files(channel.path) if p.endswith(name)]
    data = channel.read_private(os.path.basename(paths[0]), 1 << 31) if paths else None
    if not data:
        raise FlameprofError(missing or f"the agent in process {target.pid} wrote no profile")
    profile = storage.loads(data, f"profile from process {target.pid}")
    agent_tid = profile.meta.pop("agent_tid", None)
    if isinstance(agent_tid, int):
        profile = profile.without_thread(target.pid, agent_tid)
    profile.meta.update(collector="attach", backend="inject")
    return profile
