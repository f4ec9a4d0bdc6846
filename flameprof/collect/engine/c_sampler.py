"""The C sampler's Python side: the same profile as ``PythonSampler``, at a fraction of the cost.

``flameprof._native.Sampler`` walks the frames of all threads and keeps interned frames, stacks
and compact sample rows in C; it calls back here only for what it sees for the first time (a new
code object, stack, thread, layer-hook result or truncation marker), and those callbacks intern
into the same ``ProfileBuilder`` the Python sampler uses. Unlike it, each row also says whether its
thread held the GIL at the tick or waited for it. The rows stay in C (11 bytes a sample)
until a profile is built or the memory limit folds the oldest (``take_ticks``): the sampler is one
of the builder's ``sample_stores``.
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Literal

from ... import _native
from ...model.builder import ProfileBuilder
from .interning import MAX_DEPTH, code_frame_id, sampled_thread, truncation_marker
from .sampler_base import SamplerBase

if TYPE_CHECKING:
    import numpy as np

# Seconds between runs of the tick hooks (process counters, part flushes) on the clock thread. Each
# run takes the GIL from the program: about 0.6 ms of a PyTorch loop's time on this machine.
TICK_HOOK_INTERVAL = 0.2

atexit.register(_native.stop_clock)  # before the interpreter goes away, never during


_TYPECODES: tuple[Literal["d", "I", "H", "i", "f", "B"], ...] = (
    "d",
    "I",
    "H",
    "i",
    "d",
    "f",
    "B",
)  # of the columns of Sampler.columns()


def _views(columns: tuple) -> tuple:
    return tuple(memoryview(data or b"").cast(code) for data, code in zip(columns, _TYPECODES))


class CSampler(SamplerBase):
    """Sampled from a C clock thread (see native/sampler.c), so no Python thread is added to the
    program; one runs at a time per process."""

    kind = "native"

    def __init__(self, builder: ProfileBuilder, rate: float = 100.0, pid: int | None = None) -> None:
        super().__init__(builder, rate, pid)
        self._c = _native.Sampler(
            resolve_code=lambda code: code_frame_id(builder, self.boundary_codes, code),
            resolve_stack=builder.stack_id,
            resolve_thread=lambda ident: sampled_thread(builder, self.pid, ident),
            resolve_frame=builder.frame,
            resolve_marker=lambda dropped: truncation_marker(builder, dropped),
            hooks=self.frame_hooks,
            scopes=self.scopes,
            max_depth=MAX_DEPTH,
        )
        self._active = False
        builder.sample_stores.append(self)

    def sample(self, exclude: int | None = None) -> None:
        self._c.sample(exclude or 0)

    def _tables_changed(self) -> None:
        self._c.invalidate()  # applied at the start of the next sample, on whichever thread takes it

    def _mark_start(self) -> None:
        self._c.mark_start()

    def _start_thread(self) -> None:
        self._c.start_clock(self.interval, self._run_tick_hooks, TICK_HOOK_INTERVAL)
        self._active = True

    def _stop_thread(self) -> int | None:
        _native.stop_clock()
        self._active = False
        return None

    @property
    def running(self) -> bool:
        return self._active

    def reset_after_fork(self) -> None:
        super().reset_after_fork()
        self._active = False
        self._c.reset_threads()

    @property
    def ticks(self) -> int:
        return self._c.ticks

    @property
    def busy(self) -> float:
        return self._c.busy

    @property
    def memory(self) -> int:
        """Bytes held by the C tables and sample buffers."""
        return self._c.memory

    def __len__(self) -> int:
        return self._c.rows

    def take_ticks(
        self, n: int
    ) -> tuple[list[float], memoryview, memoryview, memoryview, memoryview, memoryview]:
        """Remove the first ``n`` completed ticks (the oldest rows) from the C buffers; returns their
        rows as columns (time since t0, thread, stack, wall, cpu, gil), without numpy."""
        b = self.builder
        with b.lock:
            tick_time, tick_rows, thread, stack, wall, cpu, gil = _views(self._c.columns(0, n))
            times: list[float] = []
            t0 = self.t0
            for tick, rows in zip(tick_time, tick_rows):
                times += [tick - t0] * rows
            b.rows_taken_off += self._c.discard(len(tick_time))
        return times, thread, stack, wall, cpu, gil

    def discard_all(self) -> int:
        """Drop every completed row; returns how many."""
        return self._c.discard(self._c.completed_ticks)

    @property
    def completed_ticks(self) -> int:
        return self._c.completed_ticks

    def rows_in(self, first_tick: int, limit: int) -> int:
        return self._c.rows_in(first_tick, limit)

    def part_column(self, which: int, first_tick: int, limit: int) -> bytes:
        """One part-file column of ``limit`` ticks from ``first_tick`` on (see native/sampler.c)."""
        return self._c.part_column(which, first_tick, limit, self.t0)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(time since t0, thread, stack, wall, cpu, gil) as numpy arrays, rows of completed samples only."""
        import numpy as np

        tick_time, tick_rows, thread, stack, wall, cpu, gil = self._c.columns()
        times = np.frombuffer(tick_time, dtype=np.float64) - self.t0
        return (
            np.repeat(times, np.frombuffer(tick_rows, dtype=np.uint32)),
            np.frombuffer(thread, dtype=np.uint16).astype(np.int32),
            np.frombuffer(stack, dtype=np.int32).copy(),
            np.frombuffer(wall, dtype=np.float64).copy(),
            np.frombuffer(cpu, dtype=np.float32).astype(np.float64),
            np.frombuffer(gil, dtype=np.uint8).copy(),
        )
