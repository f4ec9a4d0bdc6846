"""The Python API: ``Profiler`` (start/stop/save, context manager, decorator) and ``profile()``.

One sampling thread serves the whole process; profilers share it by reference count, so nested
or overlapping profilers are safe and each gets the samples taken during its own window.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .collect.counters import CounterRecorder
from . import scopes
from .collect import torch_hooks
from .collect.backend import SamplerBase, make_sampler
from .model.builder import ProfileBuilder

if TYPE_CHECKING:
    from .model.profile import Profile


class _Session:
    """The process-wide sampler and the builder it fills."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.sampler: SamplerBase | None = None
        self.counters: CounterRecorder | None = None
        self.builder: ProfileBuilder | None = None
        self.start_time = 0.0

    def acquire(self, rate: float, backward_layers: bool = False) -> None:
        with self.lock:
            if self.users == 0:
                self.builder = ProfileBuilder()
                self.start_time = time.time()
                self.sampler = make_sampler(self.builder, rate)
                scopes.activate(self.sampler, self.builder)
                torch_hooks.install(self.sampler, backward_layers)
                self.sampler.start()
                self.counters = CounterRecorder(self.sampler.t0)
                self.sampler.tick_hooks.append(self.counters.tick)
            self.users += 1

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

    def snapshot(self, first: int, last: int, meta: dict) -> "Profile":
        """A Profile of samples ``first:last`` with the session's frames and stacks."""
        assert self.builder is not None and self.sampler is not None
        with self.lock:
            b = self.builder
            profile = b.build()
            meta = {**b.meta, **meta}  # e.g. scope_phases recorded by user scopes
        profile.select(slice(first, last))
        if self.counters is not None:
            start = float(meta.get("window_start", 0.0))
            profile.counters = self.counters.series(start, start + float(meta.get("duration", float("inf"))))
        sampler = self.sampler
        rate, achieved = 1.0 / sampler.interval, sampler.achieved_rate()
        profile.meta = dict(meta, start_time=self.start_time, sampler=sampler.kind, rate=rate,
                            ticks=sampler.ticks, sampler_busy=sampler.busy, achieved_rate=achieved,
                            sampler_starved=achieved < 0.5 * rate)
        return profile


SESSION = _Session()


def run_metadata() -> dict:
    """What a profile records about the process it was taken in."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "argv": list(sys.argv),
        "python": sys.version.split()[0],
        "platform": sys.platform,
    }


class Profiler:
    """Samples every thread of this process between ``start()`` and ``stop()``.

    ``with Profiler(output="out/"):`` saves on exit; ``@Profiler(output=...)`` profiles each call.
    """

    def __init__(self, output: str | os.PathLike | None = None, rate: float = 100.0, mode: str = "wall",
                 backward_layers: bool = False, **render_options: Any) -> None:
        if not 0 < rate <= 10_000:
            raise ValueError("rate must be in (0, 10000] Hz")
        self.output = output
        self.rate = rate
        self.mode = mode
        self.render_options = render_options
        self.backward_layers = backward_layers  # see collect/torch_hooks.py
        self.profile: "Profile | None" = None
        self._first: int | None = None
        self._t_start = 0.0

    @property
    def running(self) -> bool:
        return self._first is not None

    def start(self) -> "Profiler":
        if self.running:
            raise RuntimeError("this Profiler is already running")
        SESSION.acquire(self.rate, self.backward_layers)
        assert SESSION.builder is not None
        self._first = SESSION.builder.num_samples
        self._t_start = SESSION.now()
        return self

    def stop(self) -> "Profile":
        """Stop sampling (the shared sampler stops with its last user) and return this window's profile."""
        if self._first is None:
            raise RuntimeError("this Profiler is not running")
        first, self._first = self._first, None
        duration = SESSION.now() - self._t_start
        meta = dict(run_metadata(), duration=duration, window_start=self._t_start, mode=self.mode)
        with SESSION.lock:
            SESSION.release()
            assert SESSION.builder is not None
            last = SESSION.builder.num_samples
            self.profile = SESSION.snapshot(first, last, meta)
        return self.profile

    def save(self, output: str | os.PathLike | None = None) -> list[str]:
        """Write profile.flameprof, profile.folded and profile.svg into ``output``; returns the paths."""
        from .outputs import OutputOptions, write_outputs

        if self.profile is None:
            raise RuntimeError("nothing to save: call stop() first")
        target = output if output is not None else self.output
        if target is None:
            raise ValueError("no output directory given")
        options = OutputOptions(mode=self.mode, **self.render_options)
        return write_outputs(self.profile, os.fspath(target), options)

    def __enter__(self) -> "Profiler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.output is not None:
            self.save()

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            inner = Profiler(self.output, self.rate, self.mode, self.backward_layers, **self.render_options)
            try:
                with inner:
                    return func(*args, **kwargs)
            finally:
                self.profile = inner.profile

        return wrapper


def profile(output: str | os.PathLike | None = "flameprof-out", rate: float = 100.0, mode: str = "wall",
            backward_layers: bool = False, **render_options: Any) -> Profiler:
    """``with flameprof.profile(output="out/"):`` profiles the block and writes the outputs."""
    return Profiler(output, rate, mode, backward_layers, **render_options)
