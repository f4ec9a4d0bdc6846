"""``ProfileBuilder``: interns frames, stacks and threads and collects sample rows while a collector runs.

No numpy here, so the sampler can use it inside a profiled program cheaply; ``build()`` imports
the numpy-backed ``Profile`` only when a profile is made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from .records import GIL_UNKNOWN, Frame, Mark, ProcessInfo, ThreadInfo
from .time_windows import WindowedMarks, WindowedSamples

if TYPE_CHECKING:
    import numpy as np

    from .profile import Profile


class SampleStore(Protocol):
    """Sample rows kept outside the builder's lists (the C sampler's buffers: collect/engine/
    c_sampler.py), counted in ticks; what the builder, the part writer and the memory limit use."""

    @property
    def completed_ticks(self) -> int: ...
    def __len__(self) -> int: ...
    def take_ticks(
        self, n: int
    ) -> tuple[list[float], memoryview, memoryview, memoryview, memoryview, memoryview]: ...
    def discard_all(self) -> int: ...
    def rows_in(self, first_tick: int, limit: int) -> int: ...
    def part_column(self, which: int, first_tick: int, limit: int) -> bytes: ...
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...


class ProfileBuilder:
    """Interns frames and stacks and appends samples; collectors and importers build profiles through it."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        self.frames: list[Frame] = []
        self._frame_ids: dict[Frame, int] = {}
        self.stack_parent: list[int] = []
        self.stack_frame: list[int] = []
        self._stack_ids: dict[tuple[int, int], int] = {}
        self.threads: list[ThreadInfo] = []
        self._thread_ids: dict[tuple[int, int], int] = {}
        self.processes: list[ProcessInfo] = []
        self.time: list[float] = []
        self.thread: list[int] = []
        self.stack: list[int] = []
        self.wall: list[float] = []
        self.cpu: list[float] = []
        # Compact sample stores (the native sampler's C buffers): each has len() and columns() ->
        # (time, thread, stack, wall, cpu, gil) arrays; their rows come before the list columns' rows,
        # whose GIL states are unknown (records.GIL_UNKNOWN: the pure-Python sampler cannot tell).
        self.sample_stores: list[SampleStore] = []
        self.marks: list[Mark] = []
        # Callables that move marks recorded elsewhere (the C step hook's buffer) into ``marks``;
        # collect_marks() runs them before the marks are read.
        self.mark_sources: list[Callable[[], None]] = []
        self.counters: dict[str, tuple[list[float], list[float]]] = {}
        self.meta: dict[str, Any] = dict(meta or {})
        # Samples and marks taken off the front of the raw rows and ``marks`` to bound memory (see
        # model/time_windows.py), and how many rows were taken off: sample indexes count from the first
        # sample ever recorded, so a window ``first:last`` stays the same rows.
        self.windowed = WindowedSamples()
        self.windowed_marks = WindowedMarks()
        self.rows_taken_off = 0
        # held while rows are taken off or read, by whichever thread does it
        self.lock = threading.RLock()

    def frame(self, frame: Frame) -> int:
        fid = self._frame_ids.get(frame)
        if fid is None:
            fid = self._frame_ids[frame] = len(self.frames)
            self.frames.append(frame)
        return fid

    def stack_id(self, frame_ids: Iterable[int], parent: int = -1) -> int:
        """Intern a root-first sequence of frame ids below ``parent``; -1 is the empty stack."""
        ids = self._stack_ids
        for fid in frame_ids:
            key = (parent, fid)
            sid = ids.get(key)
            if sid is None:
                sid = ids[key] = len(self.stack_parent)
                self.stack_parent.append(parent)
                self.stack_frame.append(fid)
            parent = sid
        return parent

    def thread_id(self, pid: int, tid: int, name: str = "") -> int:
        key = (pid, tid)
        idx = self._thread_ids.get(key)
        if idx is None:
            idx = self._thread_ids[key] = len(self.threads)
            self.threads.append(ThreadInfo(pid, tid, name))
        elif name and self.threads[idx].name != name:
            self.threads[idx] = ThreadInfo(pid, tid, name)
        return idx

    def process(self, info: ProcessInfo) -> None:
        if all(p.pid != info.pid or p.host != info.host for p in self.processes):
            self.processes.append(info)

    def add_sample(self, time: float, thread: int, stack: int, wall: float, cpu: float = 0.0) -> None:
        self.time.append(time)
        self.thread.append(thread)
        self.stack.append(stack)
        self.wall.append(wall)
        self.cpu.append(cpu)

    def add_stack_sample(
        self,
        frames: Iterable[Frame],
        weight: float,
        thread: int = 0,
        time: float = 0.0,
        cpu: float | None = None,
    ) -> None:
        """Convenience for importers: one aggregated stack with a weight in seconds."""
        sid = self.stack_id([self.frame(f) for f in frames])
        self.add_sample(time, thread, sid, weight, weight if cpu is None else cpu)

    @property
    def num_samples(self) -> int:
        """Samples recorded so far, folded and raw: the index the next sample will have."""
        return self.rows_taken_off + sum(len(store) for store in self.sample_stores) + len(self.time)

    def take_list_rows(self, n: int) -> tuple[list[float], list[int], list[int], list[float], list[float]]:
        """Remove the first ``n`` rows of the list columns; returns them (time, thread, stack, wall, cpu)."""
        with self.lock:
            taken = (self.time[:n], self.thread[:n], self.stack[:n], self.wall[:n], self.cpu[:n])
            for column in (self.time, self.thread, self.stack, self.wall, self.cpu):
                del column[:n]
            self.rows_taken_off += len(taken[0])
            return taken

    def fold_meta(self) -> dict[str, Any]:
        """What a profile's ``meta["folded"]`` says of its folded samples; empty when none are."""
        f = self.windowed
        return {"folded": {"samples": f.samples, "until": f.until, "window": f.window}} if f.samples else {}

    def forget_samples(self) -> None:
        """Drop every sample and mark recorded so far (a forked child's parent's), raw and folded."""
        with self.lock:
            self.collect_marks()
            for store in self.sample_stores:
                self.rows_taken_off += store.discard_all()
            self.take_list_rows(len(self.cpu))
            self.windowed = WindowedSamples()
            self.windowed_marks = WindowedMarks()
            self.marks.clear()

    def collect_marks(self) -> None:
        for source in self.mark_sources:
            source()

    def build(self, first: int = 0, last: int | None = None, epoch: int = 0) -> Profile:
        """The profile of samples ``first:last`` (indexes as ``num_samples`` counts them); when some of
        them were folded, the folded rows of epochs from ``epoch`` on (``folded.cut()`` when the
        window opened) stand for them."""
        import numpy as np

        from .profile import Profile

        with self.lock:
            self.collect_marks()
            dtypes = (np.float64, np.int32, np.int32, np.float64, np.float64, np.uint8)
            n_list = len(self.cpu)  # the list columns are appended time first, cpu last
            with_folded = first < self.rows_taken_off
            parts: list[tuple[Collection[float], ...]] = [self.windowed.rows(epoch)] if with_folded else []
            parts += [store.columns() for store in self.sample_stores]
            parts.append(
                (
                    self.time[:n_list],
                    self.thread[:n_list],
                    self.stack[:n_list],
                    self.wall[:n_list],
                    self.cpu[:n_list],
                    np.full(n_list, GIL_UNKNOWN, dtype=np.uint8),
                )
            )
            marks = self.windowed_marks.marks() + self.marks
            raw_first = max(first - self.rows_taken_off, 0)
            raw_last = None if last is None else max(last - self.rows_taken_off, 0)
        columns = [np.concatenate([np.asarray(p[i], dtype=d) for p in parts]) for i, d in enumerate(dtypes)]
        n_folded = len(parts[0][0]) if with_folded else 0
        n_raw = len(columns[0]) - n_folded
        stop = n_raw if raw_last is None else min(raw_last, n_raw)
        if raw_first or stop < n_raw:
            keep = np.r_[0:n_folded, n_folded + raw_first : n_folded + stop]
            columns = [column[keep] for column in columns]
        return Profile(
            frames=list(self.frames),
            stack_parent=np.asarray(self.stack_parent, dtype=np.int32),
            stack_frame=np.asarray(self.stack_frame, dtype=np.int32),
            threads=list(self.threads),
            processes=list(self.processes),
            sample_time=columns[0],
            sample_thread=columns[1],
            sample_stack=columns[2],
            sample_wall=columns[3],
            sample_cpu=columns[4],
            sample_gil=columns[5],
            marks=sorted(marks, key=lambda m: m.time),  # drained sources append late
            counters={
                k: (np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64))
                for k, (t, v) in self.counters.items()
            },
            meta=dict(self.meta),
        )
