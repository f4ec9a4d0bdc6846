"""The side of ``flameprof attach`` that runs inside the target process.

The debugger queues a tiny bootstrap as a pending call, so the interpreter runs it in the main
thread at a safe point between bytecodes; the bootstrap only starts a thread running ``serve``.
``serve`` connects back to the CLI's unix socket in the private channel directory and samples with
the process-wide profiling session (the one ``Profiler`` and ``flameprof run`` use, so the profile
has the same layer frames, marks and counters). It writes the samples into a part file in the
channel (``parts.PartWriter``: no numpy needed, so any 3.10-3.13 interpreter can be profiled) every
few seconds, so a killed target still leaves most of them, and a last time when the CLI says stop,
the connection closes or the interpreter exits. Then it releases the session: no thread, hook or
handler of flameprof is left in the target, only its imported (inert) modules.

With ``--subprocesses`` the agent also follows the children the target forks during the attach
(DataLoader workers re-created every epoch) with ``flameprof run``'s own machinery
(``child.enable_tree``): a forked child restarts the sampler and writes its own part into the
channel. At detach the target stops following (``child.disable_tree``) and marks the channel
``detached``; each child still sampling sees the mark from its sampler's tick, writes its final
part and releases its session on a short-lived thread, and runs on unprofiled.

Nothing here may raise into the target or write to its stdout/stderr.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from typing import NoReturn

from ...model.records import ProcessInfo
from ..engine import choose_sampler
from ..engine.sampler_base import start_without_signals
from ..engine.session import SESSION, run_metadata
from ..engine.trace_window import export_window, trace_path
from ..jobs import child
from ..jobs.child import command_line, process_role
from ..jobs.parts import PartWriter, part_path

SOCKET_NAME = "control.sock"
DETACHED = "detached"  # created in the channel at the end: followed children stop profiling
DETACH_THREAD = "flameprof-detach"  # the thread that ends profiling in a followed child
CONNECT_TIMEOUT = 5.0
FLUSH_INTERVAL = 2.0  # seconds between part writes while profiling
MAX_LINE = 65536
CHECK_INTERVAL = 0.1  # seconds between a followed child's looks for the end of the attach


def mark_detached(channel: str) -> None:
    """Tell the followed children that the attach is over (both the agent and the CLI do)."""
    try:
        os.close(
            os.open(
                os.path.join(channel, DETACHED), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
        )
    except OSError:  # there already, or the channel is gone: either way the children stop
        pass


def serve(channel: str) -> None:
    """Connect to the CLI listening in ``channel`` and profile until told to stop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(os.path.join(channel, SOCKET_NAME))
        _Agent(sock, channel).run()
    except Exception:  # the CLI went away or the channel is gone: leave the target alone
        pass
    finally:
        sock.close()


def _quiet_session_start() -> None:
    """Keep the session's start from writing to the target's stderr."""
    if not choose_sampler.native_available():  # e.g. built for another Python: the Python sampler, silently
        choose_sampler._warned = True


class _Agent:
    def __init__(self, sock: socket.socket, channel: str) -> None:
        self.sock = sock
        self.channel = channel
        self.lock = threading.Lock()
        self.tid = threading.get_native_id()
        self.writer: PartWriter | None = None
        self.finished = False
        self.main = True
        self.t_start = 0.0
        self.follower: _ForkFollower | None = None
        self.pid = os.getpid()
        self.exit_before = os._exit

    def send(self, **event: object) -> None:
        try:
            self.sock.sendall((json.dumps(event) + "\n").encode("utf-8"))
        except OSError:
            pass

    def read_line(self) -> bytes | None:
        """The CLI's next line; None when FLUSH_INTERVAL passes first; b"" when the CLI is gone."""
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_LINE:
            try:
                chunk = self.sock.recv(4096)
            except TimeoutError:
                if data:
                    continue
                return None
            if not chunk:
                return data
            data += chunk
        return data

    def run(self) -> None:
        self.sock.settimeout(None)
        line = self.read_line()
        if not line:  # the attach ended before this agent was let in
            return
        config = json.loads(line)
        self.main = bool(config.get("main", True))
        if not self.main and os.path.exists(part_path(self.channel, socket.gethostname(), os.getpid())):
            self.send(event="error", reason="followed", message="profiled already, as a followed fork")
            return
        try:
            steps = config.get("trace_steps")
            self.start(
                float(config.get("rate", 100.0)),
                bool(config.get("backward_layers", False)),
                bool(config.get("follow_forks", False)),
                (1, 1 + int(steps)) if steps else None,  # the next whole steps: the current one is half over
            )
        except Exception as exc:
            self.send(event="error", message=f"the agent could not start: {type(exc).__name__}: {exc}")
            return
        atexit.register(self.finish, "exit")
        self.exit_before, os._exit = os._exit, self.exit
        self.send(event="started")
        self.sock.settimeout(FLUSH_INTERVAL)
        try:
            while self.read_line() is None:  # until "stop", or end of file when the CLI is gone
                try:
                    self.flush()
                except Exception:  # e.g. a full disk: the next flush may succeed, the final one reports
                    pass
        finally:
            self.finish("stop")
            atexit.unregister(self.finish)

    def start(
        self, rate: float, backward_layers: bool, follow_forks: bool, trace_steps: tuple[int, int] | None
    ) -> None:
        """Join (or start) the process's profiling session and begin this attach's part."""

        _quiet_session_start()
        SESSION.acquire(rate, backward_layers, trace_steps)
        try:
            self.t_start = SESSION.now()
            assert SESSION.builder is not None  # acquired just above
            self.writer = PartWriter(self.channel, SESSION.builder, socket.gethostname(), os.getpid())
            if follow_forks:
                self.follower = _ForkFollower.start(self.channel, rate, self.sock)
        except BaseException:
            SESSION.release()
            raise

    def flush(self, final: bool = False) -> None:

        series = {} if SESSION.counters is None else SESSION.counters.points()
        sampler = SESSION.sampler
        assert sampler is not None and self.writer is not None  # started: flushes come after start()
        meta = dict(
            run_metadata(),
            start_time=SESSION.start_time,
            window_start=self.t_start,
            duration=SESSION.now() - self.t_start,
            rate=1.0 / sampler.interval,
            sampler=getattr(sampler, "kind", ""),
            agent_tid=self.tid,
        )
        role = "main" if self.main else process_role()  # a DataLoader worker knows its id only later
        info = ProcessInfo(os.getpid(), role, meta["host"], command_line(), os.getppid())
        self.writer.write(info, meta, series, final)

    def exit(self, status: int) -> NoReturn:
        """``os._exit`` while attached, which skips ``atexit`` (forked multiprocessing children end so)."""
        if os.getpid() == self.pid:
            self.finish("exit")
        self.exit_before(status)

    def finish(self, reason: str) -> None:
        """Stop sampling and write the final part; runs once, from the agent thread, atexit or os._exit
        (not in a forked child, which inherited them)."""

        if os.getpid() != self.pid:
            return
        with self.lock:
            if self.finished or self.writer is None:
                return
            self.finished = True
            _unhook_exit()
            if self.follower is not None:
                # only the target's end is the attach's: a child injected at the start that exits
                # leaves the other children followed
                self.follower.stop(end_attach=self.main)
            try:
                if SESSION.window is not None:
                    export_window(SESSION.window, trace_path(self.channel, socket.gethostname(), self.pid))
                SESSION.release()
                self.flush(final=True)
                self.send(event="saved", reason=reason)
            except Exception as exc:
                self.send(
                    event="error",
                    message=f"the agent could not save the profile: {type(exc).__name__}: {exc}",
                )
            self.writer = None
            _drop_samples()


def _unhook_exit() -> None:
    """Give ``os._exit`` back from the agent's hook (a followed child inherits it too)."""
    agent = getattr(os._exit, "__self__", None)
    if isinstance(agent, _Agent):
        os._exit = agent.exit_before


def _drop_samples() -> None:
    """When nobody else profiles this process, free the session's samples (a long attach holds many MB)."""

    with SESSION.lock:
        if SESSION.users == 0:
            SESSION.builder = SESSION.sampler = SESSION.counters = None


class _ForkFollower:
    """Profiles the children the target forks during the attach, into the channel.

    Its tick hook rides along into every forked child (the sampler and its hooks survive a fork);
    in the target it does nothing, in a child it watches for the end of the attach.
    """

    def __init__(self, channel: str, sock: socket.socket) -> None:
        self.channel = channel
        self.detached = os.path.join(channel, DETACHED)
        self.pid = os.getpid()
        self.next_check = 0.0
        self.ending = False
        self.inherited: socket.socket | None = sock  # a child's copy would keep the CLI from seeing the end

    @classmethod
    def start(cls, channel: str, rate: float, sock: socket.socket) -> _ForkFollower | None:
        """Follow forks; None when this process's children are profiled already (``flameprof run``)."""

        if child.following_forks():
            return None
        follower = cls(channel, sock)
        child.enable_tree(channel, rate)
        assert SESSION.sampler is not None  # the attach's session is running
        SESSION.sampler.tick_hooks.append(follower.tick)
        return follower

    def stop(self, end_attach: bool) -> None:
        """At this process's detach: its children forked from now on are not followed; with
        ``end_attach`` (the target's agent) every followed child still running stops too."""

        child.disable_tree()
        hooks = SESSION.sampler.tick_hooks if SESSION.sampler is not None else []
        if self.tick in hooks:
            hooks.remove(self.tick)
        if end_attach:
            mark_detached(self.channel)

    def tick(self) -> None:
        """On the sampler's thread of every process that has it; acts only in a followed child."""
        if self.ending or os.getpid() == self.pid:
            return
        if self.inherited is not None:  # the target's connection, copied by the fork: this child's copy goes
            self.inherited.close()
            self.inherited = None
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + CHECK_INTERVAL
        if os.path.exists(self.detached) or not os.path.isdir(self.channel):
            self.ending = True  # stopping the sampler waits for this thread: another thread does it
            start_without_signals(threading.Thread(target=self.end_child, name=DETACH_THREAD, daemon=True))

    def end_child(self) -> None:
        """In a followed child: write the final part, stop sampling, release everything."""

        try:
            _unhook_exit()
            child.disable_tree()
            SESSION.release()
            _drop_samples()
        except Exception:
            pass
