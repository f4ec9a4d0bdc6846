"""The process's one sampling session: the sampler, its counters and the builder they fill.

Profilers, the attach agent and the children of a profiled job share it by reference count,
so one sampling thread serves the whole process however many users it has.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from types import CodeType
from typing import TYPE_CHECKING

from ...model.builder import ProfileBuilder
from . import scopes, torch_hooks
from .choose_sampler import make_sampler
from .counters import CounterRecorder
from .layers import NAMER
from .memory_limit import DEFAULT_MEMORY_LIMIT, MemoryLimit
from .trace_window import TraceWindow, read_window

if TYPE_CHECKING:
    from ...model.profile import Profile
    from .c_sampler import CSampler
    from .python_sampler import PythonSampler


class _Session:
    """The process-wide sampler and the builder it fills."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.sampler: CSampler | PythonSampler | None = None
        self.counters: CounterRecorder | None = None
        self.builder: ProfileBuilder | None = None
        self.start_time = 0.0
        self.window: TraceWindow | None = None
        self.memory_limit: MemoryLimit | None = None
        # where stacks begin (the frames that run the target), for every sampler the session makes:
        # set before the first user starts, so no tick sees the target's runner before they apply
        self.boundary_codes: set[CodeType] = set()

    def acquire(
        self,
        rate: float,
        backward_layers: bool = False,
        trace_steps: tuple[int, int] | None = None,
        max_memory: int = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        """Start sampling with the first user; ``trace_steps`` (first, last) also traces those steps;
        ``max_memory`` bounds the bytes the profile holds (the first user's applies)."""
        with self.lock:
            if self.users == 0:
                self.builder = ProfileBuilder()
                self.sampler = make_sampler(self.builder, rate)
                # the wall-clock time of the sampler's t0, which every sample time counts from (taken
                # before make_sampler it was 1.4-1.8 ms early, and more where that imported modules)
                self.start_time = time.time() - (time.perf_counter() - self.sampler.t0)
                self.sampler.boundary_codes.update(self.boundary_codes)
                scopes.activate(self.sampler, self.builder)
                hooks = torch_hooks.install(self.sampler, backward_layers)
                self.window = None
                if trace_steps is not None:
                    self.window = TraceWindow(*trace_steps, NAMER)
                    hooks.add_window(self.window)
                self.sampler.start()
                self.counters = CounterRecorder(self.sampler.t0)
                self.memory_limit = MemoryLimit(self.builder, max_memory)
                self.sampler.tick_hooks += [self.counters.tick, self.memory_limit.tick]
            self.users += 1

    def add_boundary_codes(self, codes: Iterable[CodeType]) -> None:
        """Stacks begin above these frames, from the next tick on and in every later sampler."""
        with self.lock:
            self.boundary_codes.update(codes)
            if self.sampler is not None:
                self.sampler.boundary_codes.update(codes)

    def release(self) -> None:
        with self.lock:
            if self.users == 0:
                return
            self.users -= 1
            if self.users == 0 and self.sampler is not None:
                self.sampler.stop()
                torch_hooks.uninstall()
                scopes.deactivate(self.sampler)

    def now(self) -> float:
        """Seconds since the session's sampler started (the time base of its samples)."""
        assert self.sampler is not None
        return time.perf_counter() - self.sampler.t0

    def snapshot(self, first: int, last: int, meta: dict, epoch: int = 0) -> Profile:
        """A Profile of samples ``first:last`` with the session's frames and stacks (``epoch``: of the
        folded samples, see ProfileBuilder.build)."""
        assert self.builder is not None and self.sampler is not None
        with self.lock:
            b = self.builder
            profile = b.build(first, last, epoch)
            meta = {**b.meta, **meta}  # e.g. scope_phases recorded by user scopes
            meta.update(b.fold_meta())
        if self.counters is not None:
            start = float(meta.get("window_start", 0.0))
            profile.counters = self.counters.series(start, start + float(meta.get("duration", float("inf"))))
        if self.window is not None:
            self.window.close()
            profile.trace = read_window(self.window, self.start_time)
            if profile.trace is not None:
                from ..importers.kineto_profile import memory_counters  # numpy: only when taking a profile

                profile.counters.update(memory_counters(profile.trace.memory))
        sampler = self.sampler
        rate, achieved = 1.0 / sampler.interval, sampler.achieved_rate()
        profile.meta = dict(
            meta,
            start_time=self.start_time,
            sampler=sampler.kind,
            rate=rate,
            ticks=sampler.ticks,
            sampler_busy=sampler.busy,
            achieved_rate=achieved,
            sampler_starved=achieved < 0.5 * rate,
        )
        return profile


SESSION = _Session()


def run_metadata() -> dict:
    """What a profile records about the process it was taken in. Also while the interpreter shuts
    down (a profiler stopped from a finalizer), when ``sys.argv`` may be gone."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed
        cwd = ""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "cwd": cwd,
        "argv": list(getattr(sys, "argv", None) or ()),
        "python": sys.version.split()[0],
        "platform": sys.platform,
    }
