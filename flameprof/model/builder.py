"""``ProfileBuilder``: interns frames, stacks and threads and collects sample rows while a collector runs.

No numpy here, so the sampler can use it inside a profiled program cheaply; ``build()`` imports
the numpy-backed ``Profile`` only when a profile is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .records import Frame, Mark, ProcessInfo, ThreadInfo

if TYPE_CHECKING:
    from .profile import Profile


class ProfileBuilder:
    """Interns frames and stacks and appends samples; collectors and importers build profiles through it."""

    def __init__(self, meta: dict | None = None) -> None:
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
        # (time, thread, stack, wall, cpu) arrays; their rows come before the list columns' rows.
        self.sample_stores: list = []
        self.marks: list[Mark] = []
        # Callables that move marks recorded elsewhere (the C step hook's buffer) into ``marks``;
        # collect_marks() runs them before the marks are read.
        self.mark_sources: list[Callable[[], None]] = []
        self.counters: dict[str, tuple[list[float], list[float]]] = {}
        self.meta: dict = dict(meta or {})

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
        return sum(len(store) for store in self.sample_stores) + len(self.time)

    def collect_marks(self) -> None:
        for source in self.mark_sources:
            source()

    def build(self) -> Profile:
        import numpy as np

        from .profile import Profile

        self.collect_marks()

        columns = [
            np.asarray(self.time, dtype=np.float64),
            np.asarray(self.thread, dtype=np.int32),
            np.asarray(self.stack, dtype=np.int32),
            np.asarray(self.wall, dtype=np.float64),
            np.asarray(self.cpu, dtype=np.float64),
        ]
        if self.sample_stores:
            parts = [store.columns() for store in self.sample_stores] + [columns]
            columns = [
                np.concatenate([part[i] for part in parts]).astype(col.dtype) for i, col in enumerate(columns)
            ]
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
            marks=sorted(self.marks, key=lambda m: m.time),  # drained sources append late
            counters={
                k: (np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64))
                for k, (t, v) in self.counters.items()
            },
            meta=dict(self.meta),
        )
