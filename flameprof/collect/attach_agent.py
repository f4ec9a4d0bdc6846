"""The side of ``flameprof attach`` that runs inside the target process.

The debugger queues a tiny bootstrap as a pending call, so the interpreter runs it in the main
thread at a safe point between bytecodes; the bootstrap only starts a thread running ``serve``.
``serve`` connects back to the CLI's unix socket in the private channel directory, samples with
the ordinary :class:`~flameprof.profiler.Profiler` (so the profile has the same layer scopes and
phases as ``flameprof run``) until the CLI says stop, the connection closes or the interpreter
exits, writes the profile into the channel (mode 0600) and returns: no thread, hook or handler of
flameprof is left in the target, only its imported (inert) modules.

Nothing here may raise into the target or write to its stdout/stderr.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
from dataclasses import replace

SOCKET_NAME = "control.sock"
PROFILE_NAME = "profile.flameprof"
CONNECT_TIMEOUT = 5.0
MAX_LINE = 65536


def serve(channel: str) -> None:
    """Connect to the CLI listening in ``channel`` and profile until told to stop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(os.path.join(channel, SOCKET_NAME))
        sock.settimeout(None)
        _Agent(sock, channel).run()
    except Exception:  # the CLI went away or the channel is gone: leave the target alone
        pass
    finally:
        sock.close()


class _Agent:
    def __init__(self, sock: socket.socket, channel: str) -> None:
        self.sock = sock
        self.channel = channel
        self.lock = threading.Lock()
        self.profiler = None
        self.finished = False
        self.tid = threading.get_native_id()

    def send(self, **event: object) -> None:
        try:
            self.sock.sendall((json.dumps(event) + "\n").encode("utf-8"))
        except OSError:
            pass

    def run(self) -> None:
        reader = self.sock.makefile("rb")
        config = json.loads(reader.readline(MAX_LINE) or b"{}")
        try:
            import numpy  # noqa: F401  (writing a profile needs it; fail now rather than at the end)
            from ..profiler import Profiler
            from . import backend
        except ImportError as exc:
            self.send(event="error", message=f"the target's Python {sys.version.split()[0]} cannot import "
                                             f"{exc.name or 'flameprof'}, which the in-process agent needs")
            return
        try:  # the CPU/RSS counters import psutil at their first tick, which on the C sampler's clock
            import psutil  # noqa: F401  thread would leave a _DummyThread in threading's table
        except ImportError:
            pass
        if not backend.native_available():  # e.g. built for another Python: use the Python sampler quietly,
            backend._warned = True           # since the target's stderr is not flameprof's to write to
        self.profiler = Profiler(rate=float(config.get("rate", 100.0)), mode=str(config.get("mode", "wall")))
        self.profiler.start()
        atexit.register(self.finish, "exit")
        self.send(event="started", pid=os.getpid(), python=sys.version.split()[0])
        try:
            reader.readline(MAX_LINE)  # "stop", or end of file when the CLI is gone
        finally:
            self.finish("stop")
            atexit.unregister(self.finish)

    def finish(self, reason: str) -> None:
        """Stop sampling and save; runs once, from the control thread or from atexit."""
        with self.lock:
            if self.finished or self.profiler is None:
                return
            self.finished = True
            try:
                from .. import storage

                profile = _without_thread(self.profiler.stop(), os.getpid(), self.tid)
                storage.save(profile, os.path.join(self.channel, PROFILE_NAME))
                self.send(event="saved", reason=reason, samples=profile.num_samples)
            except Exception as exc:
                self.send(event="error", message=f"the agent could not save the profile: {exc}")


def _without_thread(profile, pid: int, tid: int):
    """``profile`` without the samples of thread ``(pid, tid)`` (the agent's own, idle in a read)."""
    import numpy as np

    drop = [i for i, t in enumerate(profile.threads) if t.pid == pid and t.tid == tid]
    if not drop:
        return profile
    keep = profile.sample_thread != drop[0]
    for name in ("sample_time", "sample_thread", "sample_stack", "sample_wall", "sample_cpu"):
        setattr(profile, name, getattr(profile, name)[keep])
    remap = np.arange(len(profile.threads)) - (np.arange(len(profile.threads)) > drop[0])
    profile.sample_thread = remap[profile.sample_thread].astype(np.int32)
    profile.threads = [t for i, t in enumerate(profile.threads) if i != drop[0]]
    profile.marks = [replace(m, thread=int(remap[m.thread])) for m in profile.marks if m.thread != drop[0]]
    return profile
