"""Profiling inside the other processes of a job: forked children, spawned children, any Python subprocess.

``flameprof run`` puts a parts directory in the environment (see ``tree.py``). A Python process
started with it (through the ``startup/sitecustomize.py`` on its path) starts the sampler before
its own code runs; a process forked from a profiled one restarts the sampler in the child
(``os.register_at_fork``: the sampling thread does not survive a fork). Either way the process then
writes its samples to its own part file: every second or so from the sampler's tick, so a process
that a signal ends still leaves most of them, and once more when it ends, from ``atexit`` or from
``os._exit`` (which skips ``atexit``, and is how forked ``multiprocessing`` children end).
"""

from __future__ import annotations

import atexit
import os
import shlex
import socket
import sys
import tempfile
import threading
import time
from typing import NoReturn

from ...model.records import ProcessInfo, short_command
from ..engine.counters import CounterRecorder
from ..engine.memory_limit import DEFAULT_MEMORY_LIMIT
from ..engine.session import SESSION, run_metadata
from ..engine.trace_window import export_window, parse_steps, trace_path
from .parts import PartWriter

ENV_DIR = "FLAMEPROF_CHILD_DIR"  # the parts directory; its presence turns profiling on
ENV_RATE = "FLAMEPROF_CHILD_RATE"  # samples per second
ENV_MAX_MEMORY = "FLAMEPROF_CHILD_MAX_MEMORY"  # bytes each process's profile may hold
ENV_TREE = "FLAMEPROF_CHILD_TREE"  # "0": profile only the first Python process, not its children
ENV_TRACE = "FLAMEPROF_CHILD_TRACE_STEPS"  # "FIRST:LAST": the steps each process traces (trace_window.py)
ENV_RANK_PID = "FLAMEPROF_RANK_PID"  # set by the process that owns RANK, so its children know they are not it
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
FLUSH_INTERVAL = 1.0  # seconds between flushes, at least
FLUSH_BUDGET = 0.01  # flushing may take at most this share of the time
EXIT_WAIT = 5.0  # seconds the final flush waits for a flush in progress


class _Tree:
    """This process's part in the job: where parts go, at what rate, and its recorder if it writes one."""

    directory: str | None = None
    rate = 100.0
    recorder: _Recorder | None = None
    fork_hook = False
    exit_hooks = False


_TREE = _Tree()


def enable_tree(directory: str, rate: float) -> None:
    """Profile the children this process forks (spawned ones get the environment instead)."""
    _TREE.directory = directory
    _TREE.rate = rate
    if not _TREE.fork_hook:
        _TREE.fork_hook = True
        _take_locks_before_sampling()
        os.register_at_fork(after_in_child=_after_fork_in_child)
    _install_exit_hooks()


def disable_tree() -> None:
    """Undo ``enable_tree`` (``flameprof attach`` at detach): write this process's final part if it
    writes one, follow no more forks (the fork handler stays registered, doing nothing) and give
    ``os._exit`` and ``atexit`` back."""
    _finish_recorder()
    _TREE.recorder = None
    _TREE.directory = None
    if _TREE.exit_hooks:
        _TREE.exit_hooks = False
        atexit.unregister(_finish_recorder)
        if os._exit is _exit_after_flush:
            os._exit = _real_exit


def following_forks() -> bool:
    """Whether this process's forked children are profiled now."""
    return _TREE.directory is not None


def _take_locks_before_sampling() -> None:
    """Do here, once, what would otherwise take a module lock on the sampler's thread later: set up
    tempfile's names (the atomic part writes).

    If the process forked while the sampler's thread held such a lock, the child would inherit it
    held and hang at its own ``tempfile`` call (a forkserver forks right after it starts, while its
    sampler's first tick may be writing a part).
    """
    # private, absent from the stubs: the one call that takes the lock without making a file
    tempfile._get_candidate_names()  # type: ignore[attr-defined]  # its first call takes tempfile's module lock; later ones do not


def _install_exit_hooks() -> None:
    """Write the final part at exit, also through ``os._exit`` (inherited by forked children)."""
    if not _TREE.exit_hooks:
        _TREE.exit_hooks = True
        atexit.register(_finish_recorder)
        os._exit = _exit_after_flush


def start_from_environment() -> None:
    """Start profiling this process when a parent ``flameprof run`` asked for it (the bootstrap's entry)."""
    directory = os.environ.get(ENV_DIR)
    if not directory or _TREE.recorder is not None or not os.path.isdir(directory):
        return
    if multiprocessing_helper() == "resource_tracker":  # an idle helper that outlives its parent
        return
    rate = float(os.environ.get(ENV_RATE) or 100.0)
    try:
        trace_steps = parse_steps(os.environ[ENV_TRACE]) if os.environ.get(ENV_TRACE) else None
    except ValueError:
        trace_steps = None
    if os.environ.get(ENV_TREE) == "0":
        forget_environment(os.environ)
        _TREE.rate = rate
        _install_exit_hooks()
    else:
        enable_tree(directory, rate)
    if _rank() is not None and ENV_RANK_PID not in os.environ:
        os.environ[ENV_RANK_PID] = str(os.getpid())

    try:
        max_memory = max(int(os.environ.get(ENV_MAX_MEMORY) or DEFAULT_MEMORY_LIMIT), 2**20)
    except ValueError:
        max_memory = DEFAULT_MEMORY_LIMIT
    SESSION.acquire(rate, trace_steps=trace_steps, max_memory=max_memory)
    record_this_process(directory)


def forget_environment(env) -> None:
    """Remove what makes children profiled from ``env`` (a dict or ``os.environ``)."""
    for name in (ENV_DIR, ENV_RATE, ENV_TREE, ENV_TRACE, ENV_MAX_MEMORY):
        env.pop(name, None)
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        env.pop("PYTHONPATH", None)


# -- the process's role -----------------------------------------------------------------------


def multiprocessing_helper() -> str | None:
    """``resource_tracker`` or ``forkserver`` when this process is that multiprocessing helper.

    Both run until their parent exits, so a parent profiling its job cannot wait for them.
    """
    argv = getattr(sys, "orig_argv", None) or []
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""
    for helper in ("resource_tracker", "forkserver"):
        if code.startswith(f"from multiprocessing.{helper} import"):
            return helper
    return None


def _rank() -> str | None:
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return value
    return None


def process_role(forked_from: int = 0) -> str:
    """``dataloader worker N``, ``rank N``, a multiprocessing process name, ``fork of pid N`` for
    another forked child, or "" (the merge then names the process by its command line).

    Read at every flush, because a DataLoader worker learns its id only after the fork.
    """
    role = "multiprocessing forkserver" if multiprocessing_helper() == "forkserver" else ""
    if forked_from:
        role = f"fork of pid {forked_from}"
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None and hasattr(data, "get_worker_info") else None
    if info is not None:
        role = f"dataloader worker {info.id}"
    else:
        mp = sys.modules.get("multiprocessing")
        name = mp.current_process().name if mp is not None else "MainProcess"
        if name != "MainProcess":
            role = name
    rank = _rank()
    if rank is None:
        return role
    if os.environ.get(ENV_RANK_PID) == str(os.getpid()):
        return f"rank {rank}"
    return f"rank {rank}: {role}" if role else f"rank {rank}: {short_command(command_line())}"


def _daemonic() -> bool:
    """A daemonic multiprocessing child (DataLoader workers are): its parent ends it at exit."""
    mp = sys.modules.get("multiprocessing")
    return bool(mp is not None and mp.current_process().daemon)


def command_line() -> str:
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return " ".join(shlex.quote(a) for a in argv)


# -- the recorder ------------------------------------------------------------------------------


class _Recorder:
    """Flushes this process's samples to its part: from the sampler's tick, and once more at the end."""

    def __init__(self, directory: str, forked_from: int = 0) -> None:

        self.session = SESSION
        self.pid = os.getpid()
        self.host = socket.gethostname()
        assert SESSION.builder is not None  # the session started before its recorder
        self.writer = PartWriter(directory, SESSION.builder, self.host, self.pid)
        self.forked_from = forked_from
        self.created = time.time()
        self.busy_before = getattr(
            SESSION.sampler, "busy", 0.0
        )  # a forked child's sampler counts its parent's
        self.flush_seconds = 0.0
        self.due = 0.0  # the first tick writes a part at once: it tells the parent this process exists
        self.finished = False

    def flush(self, final: bool = False) -> float:

        session = self.session
        sampler = session.sampler
        now = time.time()
        meta = dict(
            run_metadata(),
            start_time=session.start_time,
            duration=now - session.start_time,
            rate=_TREE.rate,
            sampler=getattr(sampler, "kind", ""),
            outlives_parent=multiprocessing_helper() is not None,
            daemon=_daemonic(),
            profiled_seconds=now - self.created,  # flameprof's own cost in this process:
            profiler_seconds=getattr(sampler, "busy", 0.0) - self.busy_before + self.flush_seconds,
        )
        series = {} if session.counters is None else session.counters.points()
        info = ProcessInfo(self.pid, process_role(self.forked_from), self.host, command_line(), os.getppid())
        return self.writer.write(info, meta, series, final, timeout=EXIT_WAIT if final else None)

    def tick(self) -> None:
        now = time.monotonic()
        if self.finished or now < self.due:
            return
        try:
            cost = self.flush()
        except Exception:  # a full disk must not reach the program; the next flush may succeed
            cost = 0.0
        self.flush_seconds += cost
        self.due = time.monotonic() + max(FLUSH_INTERVAL, cost / FLUSH_BUDGET)

    def finish(self) -> None:
        """The final part; stopping the sampler first takes one last sample, so the time since the
        previous one (a starved sampler's may be long) is not lost."""
        if self.finished or os.getpid() != self.pid:
            return
        self.finished = True
        sampler = self.session.sampler
        if sampler is not None and sampler.running:
            sampler.stop()
        if self.session.window is not None:
            export_window(
                self.session.window, trace_path(os.path.dirname(self.writer.path), self.host, self.pid)
            )
        self.flush(final=True)


def _tick() -> None:
    """A tick hook of the sampler (it runs on the sampler's thread, so no thread is added)."""
    recorder = _TREE.recorder
    if recorder is not None and recorder.pid == os.getpid():
        recorder.tick()


def record_this_process(directory: str, forked_from: int = 0) -> None:
    """Flush this process's samples to its part in ``directory`` every second or so, and once more
    at its end (``run``'s own process uses the part only when a signal ends it).

    The program's signal handlers stay its own: a signal that ends the process (SIGTERM, SIGKILL)
    leaves the part of the last flush."""
    _TREE.recorder = _Recorder(directory, forked_from)
    assert SESSION.sampler is not None  # the session started before its recorder
    hooks = SESSION.sampler.tick_hooks
    if _tick not in hooks:
        hooks.append(_tick)


def discard_this_process() -> None:
    """Stop flushing this process's part and remove it (``run`` writes this process's profile itself)."""
    recorder = _TREE.recorder
    if recorder is None or recorder.pid != os.getpid():
        return
    recorder.finished = True
    with recorder.writer.lock:  # a flush in progress on the sampler's thread ends first
        try:
            os.unlink(recorder.writer.path)
        except OSError:
            pass


def _finish_recorder() -> None:
    recorder = _TREE.recorder
    if recorder is not None:
        try:
            recorder.finish()
        except Exception:
            pass


_real_exit = os._exit


def _exit_after_flush(status: int) -> NoReturn:
    """``os._exit`` in a profiled process: write the final part first (atexit will not run)."""
    _finish_recorder()
    _real_exit(status)


def _after_fork_in_child() -> None:
    """Restart sampling in a forked child of a profiled process.

    The child keeps its parent's sampler, builder and time base (so the layer hooks, boundary
    codes and interned frames stay valid and are not installed twice) and drops the parent's
    samples and marks; only what did not survive the fork is renewed: the sampling thread, the
    session lock (another thread may have held it) and the process counters.
    """
    parent = _TREE.recorder.pid if _TREE.recorder is not None else os.getppid()
    _TREE.recorder = None  # the parent's recorder and part are not this process's
    try:
        sampler = SESSION.sampler
        if _TREE.directory is None or sampler is None or SESSION.users <= 0 or not sampler.running:
            return
        SESSION.lock = threading.RLock()
        builder = sampler.builder
        builder.lock = threading.RLock()
        # first: a sample the fork cut (a callback of the parent's clock thread let the forking
        # thread in) is dropped here, and until it is no sample can be discarded
        sampler.reset_after_fork()
        builder.forget_samples()  # the parent's samples are in its own part
        sampler.pid = os.getpid()
        old = SESSION.counters
        if old is not None:
            SESSION.counters = CounterRecorder(sampler.t0)
            sampler.tick_hooks[:] = [
                SESSION.counters.tick if h == old.tick else h for h in sampler.tick_hooks
            ]
        record_this_process(_TREE.directory, parent)
        sampler.start()
    except Exception:  # the child runs on unprofiled rather than fail
        pass
