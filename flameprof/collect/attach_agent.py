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

Nothing here may raise into the target or write to its stdout/stderr.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading

SOCKET_NAME = "control.sock"
CONNECT_TIMEOUT = 5.0
FLUSH_INTERVAL = 2.0   # seconds between part writes while profiling
MAX_LINE = 65536


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
    """Keep the session's start from writing to the target's stderr or adding a thread entry."""
    from . import backend

    try:  # the CPU/RSS counters import psutil at their first tick; on the C sampler's clock thread
        import psutil  # noqa: F401  that import would leave a _DummyThread in threading's table
    except ImportError:
        pass
    if not backend.native_available():  # e.g. built for another Python: the Python sampler, silently
        backend._warned = True


class _Agent:
    def __init__(self, sock: socket.socket, channel: str) -> None:
        self.sock = sock
        self.channel = channel
        self.lock = threading.Lock()
        self.tid = threading.get_native_id()
        self.writer = None
        self.finished = False
        self.main = True
        self.t_start = 0.0

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
            except socket.timeout:
                if data:
                    continue
                return None
            if not chunk:
                return data
            data += chunk
        return data

    def run(self) -> None:
        self.sock.settimeout(None)
        config = json.loads(self.read_line() or b"{}")
        self.main = bool(config.get("main", True))
        try:
            self.start(float(config.get("rate", 100.0)), bool(config.get("backward_layers", False)))
        except Exception as exc:
            self.send(event="error", message=f"the agent could not start: {type(exc).__name__}: {exc}")
            return
        atexit.register(self.finish, "exit")
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

    def start(self, rate: float, backward_layers: bool) -> None:
        """Join (or start) the process's profiling session and begin this attach's part."""
        from ..profiler import SESSION
        from .parts import PartWriter

        _quiet_session_start()
        SESSION.acquire(rate, backward_layers)
        try:
            self.t_start = SESSION.now()
            self.writer = PartWriter(self.channel, SESSION.builder, socket.gethostname(), os.getpid())
        except BaseException:
            SESSION.release()
            raise

    def flush(self, final: bool = False) -> None:
        from ..profiler import SESSION, run_metadata
        from ..records import ProcessInfo
        from .children import command_line, process_role
        from .counters import CPU_PERCENT, RSS_BYTES

        counters = SESSION.counters
        series = {} if counters is None else {CPU_PERCENT: (counters.times, counters.cpu),
                                              RSS_BYTES: (counters.times, counters.rss)}
        sampler = SESSION.sampler
        meta = dict(run_metadata(), start_time=SESSION.start_time, window_start=self.t_start,
                    duration=SESSION.now() - self.t_start, rate=1.0 / sampler.interval,
                    sampler=getattr(sampler, "kind", ""), agent_tid=self.tid)
        role = "main" if self.main else process_role()  # a DataLoader worker knows its id only later
        info = ProcessInfo(os.getpid(), role, meta["host"], command_line(), os.getppid())
        self.writer.write(info, meta, series, final)

    def finish(self, reason: str) -> None:
        """Stop sampling and write the final part; runs once, from the agent thread or from atexit."""
        from ..profiler import SESSION

        with self.lock:
            if self.finished or self.writer is None:
                return
            self.finished = True
            try:
                SESSION.release()
                self.flush(final=True)
                self.send(event="saved", reason=reason)
            except Exception as exc:
                self.send(event="error",
                          message=f"the agent could not save the profile: {type(exc).__name__}: {exc}")
            self.writer = None
            with SESSION.lock:
                if SESSION.users == 0:  # nobody else profiles: drop the samples (a long attach holds many MB)
                    SESSION.builder = SESSION.sampler = SESSION.counters = None
