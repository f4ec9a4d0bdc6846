"""Keep what a profile holds in the profiled process under a memory limit, however long the run.

A tick hook on the sampler's thread. Past their share of the limit, the oldest raw samples are
folded into per-window aggregates (``model/time_windows.py``) and dropped from the sampler's buffers;
marks up to the same time are folded with them; when the folded rows outgrow their own share,
their window doubles. Recent samples stay raw, so the last minutes of a run keep their full
timeline and per-step detail. Counters thin themselves (``counters.py``).
"""

from __future__ import annotations

import time

from ...model.builder import ProfileBuilder
from ...model.time_windows import WindowedMarks, WindowedSamples

DEFAULT_MEMORY_LIMIT = 64 * 2**20
# Bytes each kind of record takes, measured on CPython 3.11 (scripts/bench_memory.py): a native
# sampler's row (11 bytes in C, twice that while its buffer grows, and a part-file copy while a
# part is written); a pure-Python sampler's row (five list slots and three floats); a folded row
# (a dict entry: key tuple and a list of three floats); a mark.
C_ROW_BYTES = 24
LIST_ROW_BYTES = 120
FOLDED_ROW_BYTES = 330
MARK_BYTES = 200
# Shares of the limit: raw samples, folded rows, raw marks (the rest is frames, stacks, threads
# and the interpreter's own slack).
RAW_SHARE, WINDOWED_SHARE, MARK_SHARE = 0.5, 0.2, 0.1
FOLD_FRACTION = 1 / 16  # of the raw rows folded at a time: short pauses, rarely
CHECK_INTERVAL = 1.0  # seconds between checks


class MemoryLimit:
    """Folds ``builder``'s oldest samples and marks whenever they outgrow ``limit`` bytes' shares."""

    def __init__(self, builder: ProfileBuilder, limit: int = DEFAULT_MEMORY_LIMIT) -> None:
        self.builder = builder
        self.limit = limit
        self.folds = 0  # times samples were folded
        self._due = 0.0

    def raw_bytes(self) -> int:
        b = self.builder
        return sum(len(s) for s in b.sample_stores) * C_ROW_BYTES + len(b.cpu) * LIST_ROW_BYTES

    def tick(self) -> None:
        """A tick hook: checks at most every CHECK_INTERVAL seconds."""
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + CHECK_INTERVAL
        self.check()

    def check(self) -> None:
        """Fold what is over its share of the limit."""
        b = self.builder
        raw_limit = RAW_SHARE * self.limit
        excess = self.raw_bytes() - raw_limit
        if excess > 0:
            self.fold(excess + FOLD_FRACTION * raw_limit)
        b.collect_marks()
        if len(b.marks) * MARK_BYTES > MARK_SHARE * self.limit:
            self._fold_marks(b.marks[len(b.marks) // 2].time)
        with b.lock:  # a part writer may be reading the folded rows
            _coarsen(b.windowed, WINDOWED_SHARE * self.limit / FOLDED_ROW_BYTES)
            _coarsen(b.windowed_marks, WINDOWED_SHARE * self.limit / 4 / FOLDED_ROW_BYTES)

    def fold(self, nbytes: float) -> None:
        """Fold at least ``nbytes`` of the oldest raw samples, and the marks up to their time."""
        b = self.builder
        with b.lock:
            for store in b.sample_stores:
                rows = len(store)
                if not rows or nbytes <= 0:
                    continue
                ticks = store.completed_ticks
                n = max(1, min(ticks, round(ticks * nbytes / (rows * C_ROW_BYTES))))
                b.windowed.add(b.rows_taken_off, *store.take_ticks(n))
                nbytes -= rows * C_ROW_BYTES * n / ticks
            if nbytes > 0 and b.cpu:
                b.windowed.add(b.rows_taken_off, *b.take_list_rows(max(1, round(nbytes / LIST_ROW_BYTES))))
            self.folds += 1
            self._fold_marks(b.windowed.until)

    def _fold_marks(self, until: float) -> None:
        """Fold the marks up to ``until`` (the marks list is in time order within each source)."""
        b = self.builder
        with b.lock:
            b.collect_marks()
            old = [m for m in b.marks if m.time <= until]
            if old:
                b.windowed_marks.add(old)
                b.marks[:] = [m for m in b.marks if m.time > until]


def _coarsen(folded: WindowedSamples | WindowedMarks, limit: float) -> None:
    """Double ``folded``'s window until it has at most ``limit`` rows, or doubling stops helping
    (rows that differ in more than their window: threads, stacks, names)."""
    while len(folded) > limit:
        before = len(folded)
        folded.coarsen()
        if len(folded) > 0.9 * before:
            return
