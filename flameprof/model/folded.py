"""Old samples and marks folded into per-window aggregates, so a profile of a run of days stays
within a memory budget (``collect/engine/memory_budget.py`` decides when).

A folded sample is one row per (time window, thread, stack): the wall and CPU seconds of every
sample it stands for, stamped at the time of the last of them. Totals per stack, thread, phase and
layer stay exact (a phase is decided by the stack); only the timeline coarsens to the window. A
folded mark is one mark per (window, thread, name, value), named ``folded:<name>``, whose value
says how many marks it stands for and when the first of them was: step counts stay exact and the
first step still ends startup. No numpy: this runs inside the profiled program.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .records import Mark

FOLDED_PREFIX = "folded:"
FIRST_WINDOW = 8.0  # seconds; doubled whenever the folded rows outgrow their share of the budget


class FoldedSamples:
    """(epoch, window, thread, stack) -> [wall, cpu, last time], over the samples folded so far.

    An epoch begins at the sample where a profiling window opens (``cut``): cells never span one,
    so a window's folded samples are exactly those of its epochs."""

    def __init__(self, window: float = FIRST_WINDOW) -> None:
        self.window = window
        self.cells: dict[tuple[int, int, int, int], list[float]] = {}
        self.samples = 0  # samples folded in
        self.until = 0.0  # the time of the last of them
        self.cuts: list[int] = []  # the sample index where each epoch after the first begins

    def cut(self, index: int) -> int:
        """Begin a new epoch at sample ``index`` (a profiling window opens); returns its number."""
        self.cuts.append(index)
        return len(self.cuts)

    def __len__(self) -> int:
        return len(self.cells)

    def add(
        self,
        first: int,
        times: Iterable[float],
        threads: Iterable[int],
        stacks: Iterable[int],
        walls: Iterable[float],
        cpus: Iterable[float],
    ) -> None:
        """Fold samples in, given as columns (times on the profile's time base, in order) of the
        samples from index ``first`` on."""
        cells, window, cuts = self.cells, self.window, self.cuts
        epoch = sum(1 for c in cuts if c <= first)
        n, last = 0, self.until
        next_cut = cuts[epoch] - first if epoch < len(cuts) else -1
        for time, thread, stack, wall, cpu in zip(times, threads, stacks, walls, cpus):
            while n == next_cut:  # (two windows may open at the same sample)
                epoch += 1
                next_cut = cuts[epoch] - first if epoch < len(cuts) else -1
            key = (epoch, int(time // window), thread, stack)
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

    def coarsen(self) -> None:
        """Double the window: cells of neighbouring windows merge."""
        merged: dict[tuple[int, int, int, int], list[float]] = {}
        for (epoch, w, thread, stack), (wall, cpu, time) in self.cells.items():
            key = (epoch, w // 2, thread, stack)
            cell = merged.get(key)
            if cell is None:
                merged[key] = [wall, cpu, time]
            else:
                cell[0] += wall
                cell[1] += cpu
                cell[2] = max(cell[2], time)
        self.cells = merged
        self.window *= 2

    def rows(self, epoch: int = 0) -> tuple[list[float], list[int], list[int], list[float], list[float]]:
        """The folded rows of epochs from ``epoch`` on as sample columns (time, thread, stack, wall,
        cpu), in time order."""
        ordered = sorted(
            ((k, c) for k, c in self.cells.items() if k[0] >= epoch), key=lambda item: item[1][2]
        )
        return (
            [cell[2] for _, cell in ordered],
            [key[2] for key, _ in ordered],
            [key[3] for key, _ in ordered],
            [cell[0] for _, cell in ordered],
            [cell[1] for _, cell in ordered],
        )


class FoldedMarks:
    """(window, thread, name, value) -> [count, first time, last time], over the marks folded so far."""

    def __init__(self, window: float = FIRST_WINDOW) -> None:
        self.window = window
        self.cells: dict[tuple[int, int, str, str], list[float]] = {}

    def __len__(self) -> int:
        return len(self.cells)

    def add(self, marks: Iterable[Mark]) -> None:
        window = self.window
        for mark in marks:
            name, count, first = mark.name, 1, mark.time
            value = mark.value
            if name.startswith(FOLDED_PREFIX):  # already folded: a merged profile folded again
                info = parse_folded(mark)
                name, count, first, value = info.name, info.count, info.first, info.value
            key = (int(mark.time // window), mark.thread, name, value)
            cell = self.cells.get(key)
            if cell is None:
                self.cells[key] = [count, first, mark.time]
            else:
                cell[0] += count
                cell[1] = min(cell[1], first)
                cell[2] = max(cell[2], mark.time)

    def coarsen(self) -> None:
        cells, self.cells = self.cells, {}
        for (w, thread, name, value), (count, first, last) in cells.items():
            key = (w // 2, thread, name, value)
            cell = self.cells.get(key)
            if cell is None:
                self.cells[key] = [count, first, last]
            else:
                cell[0] += count
                cell[1] = min(cell[1], first)
                cell[2] = max(cell[2], last)
        self.window *= 2

    def marks(self) -> list[Mark]:
        """One ``folded:<name>`` mark per cell, at the time of its last mark."""
        return [
            Mark(last, thread, FOLDED_PREFIX + name, f"{int(count)} {first!r} {value}")
            for (_, thread, name, value), (count, first, last) in self.cells.items()
        ]


class FoldedMark(NamedTuple):
    name: str  # the name of the marks it stands for
    count: int
    first: float  # the time of the first of them
    last: float
    value: str


def parse_folded(mark: Mark) -> FoldedMark:
    """What a ``folded:<name>`` mark stands for (a malformed one stands for nothing)."""
    count, _, rest = mark.value.partition(" ")
    first, _, value = rest.partition(" ")
    try:
        return FoldedMark(mark.name[len(FOLDED_PREFIX) :], int(count), float(first), mark.time, value)
    except ValueError:
        return FoldedMark(mark.name[len(FOLDED_PREFIX) :], 0, mark.time, mark.time, "")


def folded_marks(marks: Iterable[Mark], name: str, thread: int | None = None) -> list[FoldedMark]:
    """The folded marks that stand for ``name`` marks (of ``thread``, when given)."""
    wanted = FOLDED_PREFIX + name
    return [parse_folded(m) for m in marks if m.name == wanted and (thread is None or m.thread == thread)]
