"""``SamplerBase``: what the C and the pure-Python sampler share, so they produce the same profile.

The sampling thread, its clock and the tables the rest of flameprof fills (boundary codes, layer
hooks, user scopes). ``choose_sampler`` picks the subclass that runs.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType

from ...model.builder import ProfileBuilder
from ...model.records import Frame

TICK_JITTER = 0.25  # how far into its interval a tick may fall (native/clock.c)

# Every signal but the faults a thread causes itself (faulthandler reports those).
ASYNC_SIGNALS = signal.valid_signals() - {
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGABRT,
    signal.SIGTRAP,
    signal.SIGKILL,
    signal.SIGSTOP,
}


class _WatchedDict(dict):
    """A dict that tells its owner when it changes (cached per-code decisions must be redone)."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__()
        self._on_change = on_change

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._on_change()

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._on_change()

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        self._on_change()

    def pop(self, *args):
        self._on_change()
        return super().pop(*args)

    def setdefault(self, key, default=None):
        self._on_change()
        return super().setdefault(key, default)

    def clear(self) -> None:
        super().clear()
        self._on_change()


class _WatchedSet(set):
    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__()
        self._on_change = on_change

    def add(self, item) -> None:
        super().add(item)
        self._on_change()

    def discard(self, item) -> None:
        super().discard(item)
        self._on_change()

    def remove(self, item) -> None:
        super().remove(item)
        self._on_change()

    def update(self, *items) -> None:
        super().update(*items)
        self._on_change()

    def clear(self) -> None:
        super().clear()
        self._on_change()


class SamplerBase:
    """The sampling thread and the shared tables; subclasses implement ``sample()``.

    ``boundary_codes``: code objects where a stack begins (the frames that ran the target from
    flameprof's runner); they and everything rootward of them are dropped. Frames of flameprof's
    own package are skipped. ``frame_hooks`` maps a code object to ``hook(frame) -> Frame | None``:
    a frame inserted just leafward of that frame (layer scopes). ``scopes`` maps a thread ident to
    its stack of ``(entered_in_frame, Frame)`` user scopes. Subclasses provide ``ticks`` (samples
    taken) and ``busy`` (seconds spent sampling).
    """

    kind = ""

    def __init__(self, builder: ProfileBuilder, rate: float = 100.0, pid: int | None = None) -> None:
        self.builder = builder
        self.interval = 1.0 / rate
        self.pid = os.getpid() if pid is None else pid
        self.boundary_codes: set[CodeType] = _WatchedSet(self._tables_changed)
        self.frame_hooks: dict[CodeType, Callable[[FrameType], Frame | None]] = _WatchedDict(
            self._tables_changed
        )
        self.scopes: dict[int, list] = {}
        self.tick_hooks: list[Callable[[], None]] = []  # run on the sampler thread after each sample
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._sampling_time = 0.0  # seconds the thread ran, over all start/stop windows

    def sample(self, exclude: int | None = None) -> None:
        """Take one sample of every thread but ``exclude`` (the sampler's own)."""
        raise NotImplementedError

    def _tables_changed(self) -> None:
        """Boundary codes or hooks changed: forget per-code decisions cached from the old tables."""
        raise NotImplementedError

    def _mark_start(self) -> None:
        """The first sample's wall time counts from now."""
        raise NotImplementedError

    def _not_watched(self, seconds: float) -> None:
        """The sampler's thread watched nothing for ``seconds`` since its last sample (its tick hooks
        ran): the next samples carry them, each at most its own interval again
        (flameprof_sampler_unwatched in native/sampler.c says why)."""
        raise NotImplementedError

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's sampling thread does not exist here; forget it and its threads."""
        self._thread = None
        self._stop = threading.Event()
        self._sampling_time = 0.0

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        self._mark_start()
        self._started = time.perf_counter()
        self._start_thread()

    def stop(self) -> None:
        """Stop the thread and take a final sample so every thread's tail is accounted for."""
        if not self.running:
            return
        exclude = self._stop_thread()
        self._sampling_time += time.perf_counter() - self._started
        self.sample(exclude=exclude)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def achieved_rate(self) -> float:
        """Samples per second the thread managed (below the requested rate when the GIL was held for long)."""
        elapsed = self._sampling_time + (time.perf_counter() - self._started if self.running else 0.0)
        return self.ticks / elapsed if elapsed > 0 else 0.0  # type: ignore[attr-defined]

    def _start_thread(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="flameprof-sampler", daemon=True)
        start_without_signals(self._thread)

    def _stop_thread(self) -> int | None:
        """Stop sampling; returns the ident of the thread that sampled (excluded from the final sample)."""
        thread = self._thread
        assert thread is not None
        self._stop.set()
        if thread is not threading.current_thread():
            thread.join()
        self._thread = None
        return thread.ident

    def _run_tick_hooks(self) -> None:
        for hook in self.tick_hooks:
            hook()

    def _loop(self) -> None:
        """One tick at a random point of the first quarter of each interval, as the C clock does
        (``next_tick`` and ``TICK_JITTER`` in native/clock.c): a loop whose period settles on a
        multiple of the interval is not seen at the same few points of its period."""
        interval = self.interval
        wait = self._stop.wait
        clock = time.perf_counter
        jitter = random.Random().random
        sample = self.sample
        ident = threading.get_ident()
        slot = clock()  # the start of the current interval
        while True:
            if wait(max(0.0, slot + interval * TICK_JITTER * jitter() - clock())):
                return
            try:
                sample(exclude=ident)
                hooks_start = clock()
                self._run_tick_hooks()
                self._not_watched(clock() - hooks_start)
            except Exception:  # never let a sampling bug reach the target
                pass
            slot += interval
            if slot + interval < clock():  # starved (a long C call held the GIL): no catching up
                slot = clock()


def start_without_signals(thread: threading.Thread) -> None:
    """Start one of flameprof's threads with the program's signals blocked in it (a thread inherits
    the mask), so the kernel delivers them to the program's threads: before 3.13 a handler tripped
    in another thread than the main one does not wake the main thread's eval loop, and may never run."""
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
