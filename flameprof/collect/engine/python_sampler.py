"""The in-process sampling thread (pure-Python path).

Every ``1/rate`` seconds it reads the stacks of all Python threads with ``sys._current_frames()``
and records, per thread, the wall time since that thread's previous sample and the CPU time the
thread used meanwhile (Linux per-thread CPU clocks), so the totals are not biased by GIL waits.
"""

from __future__ import annotations

import gc
import sys
import time
from types import FrameType

from ...model.builder import ProfileBuilder
from .interning import BOUNDARY, MAX_DEPTH, code_frame_id, sampled_thread, truncation_marker
from .sampler_base import SamplerBase


def thread_cpu_clock(native_id: int) -> int | None:
    """The Linux CPU-time clock id of a thread (as glibc's MAKE_THREAD_CPUCLOCK builds it).

    Reading a dead thread's clock fails with EINVAL instead of touching freed memory, which
    ``time.pthread_getcpuclockid`` on a finished thread could.
    """
    if not sys.platform.startswith("linux") or not native_id:
        return None
    return ((~native_id) << 3) | 6


def read_cpu(clock: int | None) -> float | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def first_cpu_baseline(cpu_now: float | None, interval: float) -> float | None:
    """Where a newly seen thread's CPU count starts.

    A thread whose whole CPU time fits in the interval since the previous tick may have started
    within it: all of that time is its first sample's (else up to one interval of a new thread's
    work went unrecorded). An older thread counts from now. Either way the error is at most one
    interval of the thread's CPU time.
    """
    if cpu_now is not None and cpu_now <= interval:
        return 0.0
    return cpu_now


class _ThreadState:
    __slots__ = ("index", "clock", "last_wall", "last_cpu")

    def __init__(self, index: int, clock: int | None, last_wall: float, last_cpu: float | None) -> None:
        self.index = index
        self.clock = clock
        self.last_wall = last_wall
        self.last_cpu = last_cpu


# Before 3.12 an allocation may run a garbage collection on the spot, and its finalizers may let
# another thread run. Reading another thread's stack allocates (``sys._current_frames()`` and
# ``frame.f_back`` build frame objects lazily on 3.11, ``frame.f_locals`` builds a dict): if that
# thread finishes the frame being built meanwhile, CPython 3.11 writes through a stale pointer and
# crashes (seen in a PyTorch training loop). So a sample runs with the collector off there, as the
# C sampler's does; the allocations still count, and the program's next one collects.
_PAUSE_GC = sys.version_info < (3, 12)


class PythonSampler(SamplerBase):
    """Samples all threads of this process into a ProfileBuilder (see ``SamplerBase`` for the tables)."""

    kind = "python"

    def __init__(self, builder: ProfileBuilder, rate: float = 100.0, pid: int | None = None) -> None:
        super().__init__(builder, rate, pid)
        self.ticks = 0
        self.busy = 0.0
        self._code_ids: dict[object, int] = {}
        self._stack_ids: dict[tuple, int] = {}
        self._threads: dict[int, _ThreadState] = {}
        self._last_tick = self.t0
        self._unwatched = 0.0  # seconds the thread did not watch, still to be given to samples

    def _tables_changed(self) -> None:
        self._code_ids = {}

    def _mark_start(self) -> None:
        self._last_tick = time.perf_counter()
        self._unwatched = 0.0

    def _not_watched(self, seconds: float) -> None:
        now = time.perf_counter()
        start, self._last_tick = self._last_tick, min(self._last_tick + seconds, now)
        self._unwatched += self._last_tick - start
        for state in self._threads.values():
            state.last_wall = min(state.last_wall + seconds, now)

    def reset_after_fork(self) -> None:
        super().reset_after_fork()
        self._threads = {}
        self._last_tick = time.perf_counter()
        self._unwatched = 0.0

    # -- sampling ------------------------------------------------------------------------
    def _code_id(self, code) -> int:
        fid = self._code_ids[code] = code_frame_id(self.builder, self.boundary_codes, code)
        return fid

    def sample(self, exclude: int | None = None) -> None:
        """Take one sample of every thread but ``exclude`` (the sampler's own)."""
        paused = _PAUSE_GC and gc.isenabled()
        if paused:
            gc.disable()
        try:
            self._sample(exclude)
        finally:
            if paused:
                gc.enable()

    def _sample(self, exclude: int | None) -> None:
        start = time.perf_counter()
        frames = sys._current_frames()
        builder = self.builder
        code_ids = self._code_ids
        stack_ids = self._stack_ids
        hooks = self.frame_hooks
        scopes = self.scopes
        states = self._threads
        now = time.perf_counter()
        rel = now - self.t0
        owed = min(self._unwatched, now - self._last_tick)  # as the C sampler's end_tick()
        for ident, frame in frames.items():
            if ident == exclude:
                continue
            state = states.get(ident)
            if state is None:
                identity = sampled_thread(builder, self.pid, ident)
                if identity is None:
                    continue
                index, native_id = identity
                clock = thread_cpu_clock(native_id)
                baseline = first_cpu_baseline(read_cpu(clock), now - self._last_tick)
                state = states[ident] = _ThreadState(index, clock, self._last_tick, baseline)
            ids: list[int] = []
            owners: list = []
            thread_scopes = scopes.get(ident)
            f: FrameType | None = frame
            while f is not None:
                code = f.f_code
                fid = code_ids.get(code)
                if fid is None:
                    fid = self._code_id(code)
                if fid == BOUNDARY:
                    break
                if fid >= 0:
                    hook = hooks.get(code) if hooks else None
                    if hook is not None:
                        extra = hook(f)
                        if extra is not None:
                            ids.append(builder.frame(extra))
                            owners.append(None)
                    ids.append(fid)
                    owners.append(f)
                f = f.f_back
            ids.reverse()
            if thread_scopes:
                owners.reverse()
                ids = _insert_scopes(ids, owners, thread_scopes, builder)
            if len(ids) > MAX_DEPTH:
                dropped = len(ids) - MAX_DEPTH + 1
                ids = ids[: MAX_DEPTH - 1] + [truncation_marker(builder, dropped)]
            key = tuple(ids)
            sid = stack_ids.get(key)
            if sid is None:
                sid = stack_ids[key] = builder.stack_id(ids)
            cpu_now = read_cpu(state.clock)
            cpu = (cpu_now - state.last_cpu) if (cpu_now is not None and state.last_cpu is not None) else 0.0
            builder.add_sample(rel, state.index, sid, now - state.last_wall + owed, max(cpu, 0.0))
            state.last_wall = now
            state.last_cpu = cpu_now
        for ident in [i for i in states if i not in frames]:
            del states[ident]
        self._last_tick = now
        self._unwatched -= owed
        self.ticks += 1
        self.busy += time.perf_counter() - start


def _insert_scopes(ids: list[int], owners: list, thread_scopes: list, builder: ProfileBuilder) -> list[int]:
    """Insert each user scope's frame just leafward of the Python frame that entered it."""
    positions = {id(f): i for i, f in enumerate(owners) if f is not None}
    inserts: dict[int, list[int]] = {}
    for entered_in, scope_frame in thread_scopes:
        pos = positions.get(id(entered_in))
        if pos is None:
            continue
        inserts.setdefault(pos, []).append(builder.frame(scope_frame))
    if not inserts:
        return ids
    out: list[int] = []
    for i, fid in enumerate(ids):
        out.append(fid)
        out.extend(inserts.get(i, ()))
    return out
