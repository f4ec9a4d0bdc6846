"""Old samples and marks folded into per-window aggregates, so a profile of a run of days stays
within a memory limit (``collect/engine/memory_limit.py`` decides when).

A folded sample is one row per (time window, thread, stack, GIL state): the wall and CPU seconds of
every sample it stands for, stamped at the time of the last of them. Totals per stack, thread, phase,
layer and GIL state stay exact (a phase is decided by the stack); only the timeline coarsens to the
window. A folded mark is one mark per (window, thread, name, value), named ``folded:<name>``, whose
value says how many marks it stands for and when the first of them was: step counts stay exact and
the first step still ends startup. No numpy: this runs inside the profiled program.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any, NamedTuple

from .records import GIL_UNKNOWN, Mark

FOLDED_PREFIX = "folded:"
FIRST_WINDOW = 8.0  # seconds; doubled whenever the folded rows outgrow their share of the budget


class _WindowCells:
    """Rows keyed by a time window (at ``WINDOW_AT`` in the key) among other things; a row's values
    merge with ``_combine``. ``coarsen`` doubles the window, merging neighbouring windows' rows."""

    WINDOW_AT = 0

    def __init__(self, window: float = FIRST_WINDOW) -> None:
        self.window = window
        self.cells: dict[tuple[Any, ...], list[float]] = {}

    def __len__(self) -> int:
        return len(self.cells)

    @staticmethod
    def _combine(cell: list[float], value: list[float]) -> None:
        raise NotImplementedError

    def _merge(self, key: tuple[Any, ...], value: list[float]) -> None:
        cell = self.cells.get(key)
        if cell is None:
            self.cells[key] = value
        else:
            self._combine(cell, value)

    def coarsen(self) -> None:
        """Double the window."""
        cells, self.cells = self.cells, {}
        i = self.WINDOW_AT
        for key, value in cells.items():
            self._merge((*key[:i], key[i] // 2, *key[i + 1 :]), value)
        self.window *= 2


class WindowedSamples(_WindowCells):
    """(epoch, window, thread, stack, GIL state) -> [wall, cpu, last time], over the samples folded
    so far.

    An epoch begins at the sample where a profiling window opens (``cut``): cells never span one,
    so a window's folded samples are exactly those of its epochs."""

    WINDOW_AT = 1

    def __init__(self, window: float = FIRST_WINDOW) -> None:
        super().__init__(window)
        self.samples = 0  # samples folded in
        self.until = 0.0  # the time of the last of them
        self.cuts: list[int] = []  # the sample index where each epoch after the first begins

    @staticmethod
    def _combine(cell: list[float], value: list[float]) -> None:
        cell[0] += value[0]
        cell[1] += value[1]
        cell[2] = max(cell[2], value[2])

    def cut(self, index: int) -> int:
        """Begin a new epoch at sample ``index`` (a profiling window opens); returns its number."""
        self.cuts.append(index)
        return len(self.cuts)

    def add(
        self,
        first: int,
        times: Iterable[float],
        threads: Iterable[int],
        stacks: Iterable[int],
        walls: Iterable[float],
        cpus: Iterable[float],
        gils: Iterable[int] | None = None,
    ) -> None:
        """Fold samples in, given as columns (times on the profile's time base, in order) of the
        samples from index ``first`` on; without ``gils``, their GIL states are unknown."""
        cells, window, cuts = self.cells, self.window, self.cuts
        epoch = sum(1 for c in cuts if c <= first)
        n, last = 0, self.until
        next_cut = cuts[epoch] - first if epoch < len(cuts) else -1
        # the fold's hot loop, so _merge is written out: times only grow, so the last is the latest
        states = repeat(GIL_UNKNOWN) if gils is None else gils
        for time, thread, stack, wall, cpu, gil in zip(times, threads, stacks, walls, cpus, states):
            while n == next_cut:  # (two windows may open at the same sample)
                epoch += 1
                next_cut = cuts[epoch] - first if epoch < len(cuts) else -1
            key = (epoch, int(time // window), thread, stack, gil)
            cell = cells.get(key)
            if cell is None:
                cells[key] = [wall, cpu, time]
            else:
                cell[0] += wall
                cell[1] += cpu
                cell[2] = time
            n += 1
            last = time
        self.samples += n
        self.until = max(self.until, last)

    def rows(
        self, epoch: int = 0
    ) -> tuple[list[float], list[int], list[int], list[float], list[float], list[int]]:
        """The folded rows of epochs from ``epoch`` on as sample columns (time, thread, stack, wall,
        cpu, gil), in time order."""
        ordered = sorted(
            ((k, c) for k, c in self.cells.items() if k[0] >= epoch), key=lambda item: item[1][2]
        )
        return (
            [cell[2] for _, cell in ordered],
            [key[2] for key, _ in ordered],
            [key[3] for key, _ in ordered],
            [cell[0] for _, cell in ordered],
            [cell[1] for _, cell in ordered],
            [key[4] for key, _ in ordered],
        )


class WindowedMarks(_WindowCells):
    """(window, thread, name, value) -> [count, first time, last time], over the marks folded so far."""

    @staticmethod
    def _combine(cell: list[float], value: list[float]) -> None:
        cell[0] += value[0]
        cell[1] = min(cell[1], value[1])
        cell[2] = max(cell[2], value[2])

    def add(self, marks: Iterable[Mark]) -> None:
        for mark in marks:
            name, count, first, value = mark.name, 1, mark.time, mark.value
            if name.startswith(FOLDED_PREFIX):  # already folded: a merged profile folded again
                info = parse_windowed(mark)
                name, count, first, value = info.name, info.count, info.first, info.value
            self._merge((int(mark.time // self.window), mark.thread, name, value), [count, first, mark.time])

    def marks(self) -> list[Mark]:
        """One ``folded:<name>`` mark per cell, at the time of its last mark."""
        return [
            Mark(last, thread, FOLDED_PREFIX + name, f"{int(count)} {first!r} {value}")
            for (_, thread, name, value), (count, first, last) in self.cells.items()
        ]


class WindowedMark(NamedTuple):
    name: str  # the name of the marks it stands for
    # the field shadows tuple.count (a method), which a NamedTuple field may do: mypy does not allow it
    count: int  # type: ignore[assignment]
    first: float  # the time of the first of them
    last: float
    value: str


def parse_windowed(mark: Mark) -> WindowedMark:
    """What a ``folded:<name>`` mark stands for (a malformed one stands for nothing)."""
    count, _, rest = mark.value.partition(" ")
    first, _, value = rest.partition(" ")
    try:
        return WindowedMark(mark.name[len(FOLDED_PREFIX) :], int(count), float(first), mark.time, value)
    except ValueError:
        return WindowedMark(mark.name[len(FOLDED_PREFIX) :], 0, mark.time, mark.time, "")


def windowed_marks(marks: Iterable[Mark], name: str, thread: int | None = None) -> list[WindowedMark]:
    """The folded marks that stand for ``name`` marks (of ``thread``, when given)."""
    wanted = FOLDED_PREFIX + name
    return [parse_windowed(m) for m in marks if m.name == wanted and (thread is None or m.thread == thread)]
