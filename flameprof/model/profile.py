"""The profile model: the one structure every collector writes and every analysis and renderer reads.

Frames and stacks are interned: a stack is a node of a parent-pointer tree
(``stack_parent[i]``, ``stack_frame[i]``), so a sample is one integer. Samples are
columns (numpy arrays), one row per observation of one thread. The record types live in
``records`` and the builder in ``builder`` (both importable without numpy); the records are
re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .records import (
    FRAME_KINDS,
    GIL_UNKNOWN,
    GIL_WAITING,
    SAMPLE_COLUMNS,
    Frame,
    Mark,
    ProcessInfo,
    ThreadInfo,
)
from .trace import Trace

__all__ = [
    "FRAME_KINDS",
    "Frame",
    "Mark",
    "ProcessInfo",
    "Profile",
    "ThreadInfo",
    "iter_stacks",
    "sampled_stacks",
]


def _f64(values: Iterable[float] = ()) -> np.ndarray:
    return np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)


def _i32(values: Iterable[int] = ()) -> np.ndarray:
    return np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int32)


def _u8(values: Iterable[int] = ()) -> np.ndarray:
    return np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.uint8)


# The weight modes: wall time, CPU time, one per sample, and the wall time of samples whose thread
# waited for the GIL (``gil``: only the C sampler records it, see records.GIL_WAITING).
MODES = ("wall", "cpu", "samples", "gil")


@dataclass
class Profile:
    """A whole profile. Times are seconds; ``sample_time`` is relative to ``meta['start_time']`` (epoch)."""

    frames: list[Frame] = field(default_factory=list)
    stack_parent: np.ndarray = field(default_factory=_i32)
    stack_frame: np.ndarray = field(default_factory=_i32)
    threads: list[ThreadInfo] = field(default_factory=list)
    processes: list[ProcessInfo] = field(default_factory=list)
    sample_time: np.ndarray = field(default_factory=_f64)
    sample_thread: np.ndarray = field(default_factory=_i32)
    sample_stack: np.ndarray = field(default_factory=_i32)
    sample_wall: np.ndarray = field(default_factory=_f64)
    sample_cpu: np.ndarray = field(default_factory=_f64)
    marks: list[Mark] = field(default_factory=list)
    counters: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None  # the traced window's ops, device activity and memory, when one ran
    # each sample's thread's part of the GIL (records.GIL_*); left out, every sample's is unknown.
    # Last, so the fields before it keep their positions.
    sample_gil: np.ndarray = field(default_factory=_u8)

    def __post_init__(self) -> None:
        self.stack_parent = _i32(self.stack_parent)
        self.stack_frame = _i32(self.stack_frame)
        self.sample_time = _f64(self.sample_time)
        self.sample_thread = _i32(self.sample_thread)
        self.sample_stack = _i32(self.sample_stack)
        self.sample_wall = _f64(self.sample_wall)
        self.sample_cpu = _f64(self.sample_cpu)
        self.sample_gil = _u8(self.sample_gil)
        if not len(self.sample_gil) and len(self.sample_stack):
            self.sample_gil = np.full(len(self.sample_stack), GIL_UNKNOWN, dtype=np.uint8)

    @property
    def num_samples(self) -> int:
        return len(self.sample_stack)

    @property
    def duration(self) -> float:
        """Wall-clock span of the run (``meta['duration']`` when the collector measured it)."""
        if "duration" in self.meta:
            return float(self.meta["duration"])
        if not self.num_samples:
            return 0.0
        return float(self.sample_time.max() - (self.sample_time - self.sample_wall).min())

    def weights(self, mode: str = "wall") -> np.ndarray:
        """Per-sample weight in seconds for ``mode`` ``wall``/``cpu``, 1 per sample for ``samples``, or
        for ``gil`` the wall time of the samples whose thread waited for the GIL (0 for the others)."""
        if mode == "wall":
            return self.sample_wall
        if mode == "cpu":
            return self.sample_cpu
        if mode == "samples":
            return np.ones(self.num_samples)
        if mode == "gil":
            return np.where(self.sample_gil == GIL_WAITING, self.sample_wall, 0.0)
        raise ValueError(f"unknown weight mode {mode!r} (expected {', '.join(MODES[:-1])} or {MODES[-1]})")

    @property
    def has_gil_states(self) -> bool:
        """Whether some sample's GIL state is known (the C sampler recorded it)."""
        return bool(np.any(self.sample_gil != GIL_UNKNOWN))

    def waiting_for_gil(self) -> Profile:
        """A copy with only the samples whose thread waited for the GIL: what ``--mode gil`` draws,
        so that sample counts, like the weights, are of those samples alone."""
        out = dataclasses.replace(self)
        out.select(self.sample_gil == GIL_WAITING)
        return out

    def select(self, rows: slice | np.ndarray) -> None:
        """Keep only the samples ``rows`` (a slice, a boolean mask or indexes) in every sample column."""
        for name in SAMPLE_COLUMNS:
            setattr(self, name, getattr(self, name)[rows])

    def without_thread(self, pid: int, tid: int) -> Profile:
        """This profile without the samples, marks and entry of thread ``(pid, tid)``."""
        drop = [i for i, t in enumerate(self.threads) if t.pid == pid and t.tid == tid]
        if not drop:
            return self
        index = drop[0]
        self.select(self.sample_thread != index)
        remap = np.arange(len(self.threads)) - (np.arange(len(self.threads)) > index)
        self.sample_thread = remap[self.sample_thread].astype(np.int32)
        self.threads = [t for i, t in enumerate(self.threads) if i != index]
        self.marks = [m._replace(thread=int(remap[m.thread])) for m in self.marks if m.thread != index]
        return self

    def stack_frames(self, stack: int) -> list[int]:
        """Frame ids of ``stack``, root first."""
        out: list[int] = []
        parent, frame = self.stack_parent, self.stack_frame
        while stack >= 0:
            out.append(int(frame[stack]))
            stack = int(parent[stack])
        out.reverse()
        return out

    def all_stack_frames(self) -> list[tuple[int, ...]]:
        """Frame-id tuples of every interned stack, computed once in parent order (parents precede children).

        Quadratic in the depth of deep stacks (every prefix is a stack with its own tuple): for tests and
        small profiles; analyses and renderers walk parents or work a depth level at a time instead."""
        out: list[tuple[int, ...]] = [()] * len(self.stack_parent)
        parents = self.stack_parent.tolist()
        frames = self.stack_frame.tolist()
        for i, (p, f) in enumerate(zip(parents, frames)):
            out[i] = (out[p] + (f,)) if p >= 0 else (f,)
        return out


def iter_stacks(profile: Profile, mode: str = "wall") -> Iterator[tuple[tuple[int, ...], float]]:
    """Aggregate samples into (root-first frame ids, summed weight): the input of tree and folded
    renderers."""
    for _, ids, weight in sampled_stacks(profile, mode):
        yield ids, weight


def sampled_stacks(profile: Profile, mode: str = "wall") -> Iterator[tuple[int, tuple[int, ...], float]]:
    """``iter_stacks`` with each stack's id first (-1 for the empty stack), in order of stack id.

    Each sampled stack's frames come from a walk up its parents, so the work is the size of the stacks
    yielded (the folded text of the profile); the frames of unsampled prefixes are never listed, which
    for a deep recursion would be quadratic in its depth.
    """
    weights = profile.weights(mode)
    if not profile.num_samples:
        return
    sums = np.bincount(profile.sample_stack + 1, weights=weights, minlength=len(profile.stack_parent) + 1)
    parents, frames = profile.stack_parent.tolist(), profile.stack_frame.tolist()
    for sid in np.nonzero(sums)[0].tolist():
        ids = []
        stack = sid - 1
        while stack >= 0:
            ids.append(frames[stack])
            stack = parents[stack]
        ids.reverse()
        yield sid - 1, tuple(ids), float(sums[sid])
