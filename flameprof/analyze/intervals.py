"""Time intervals as numpy arrays: unions, coverage, overlaps and gaps.

An interval set is a ``(n, 2)`` array of ``[start, end]`` rows. ``merged`` makes one disjoint and
sorted; the other functions take disjoint sorted sets. Every operation is vectorised: a GPU trace
holds millions of kernels.
"""

from __future__ import annotations

import numpy as np

EMPTY = np.zeros((0, 2))


def merged(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Disjoint sorted ``[[start, end], ...]`` covering the union of the intervals (touching ones join)."""
    if not len(starts):
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, dtype=float)[order], np.asarray(ends, dtype=float)[order]
    reach = np.maximum.accumulate(e)
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > reach[:-1]
    heads = np.nonzero(first)[0]
    return np.column_stack([s[heads], np.maximum.reduceat(e, heads)])


def length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


def covered(intervals: np.ndarray, start: float, end: float) -> float:
    """Seconds of ``[start, end)`` that the disjoint ``intervals`` cover."""
    if not len(intervals) or end <= start:
        return 0.0
    clipped = np.clip(intervals, start, end)
    return float((clipped[:, 1] - clipped[:, 0]).sum())


def covered_before(intervals: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each time, how much of the disjoint sorted ``intervals`` lies before it."""
    if not len(intervals):
        return np.zeros(len(times))
    edges = intervals.ravel()
    inside = np.zeros(len(edges) - 1)
    inside[::2] = 1.0  # from each start to its end, then a gap
    cumulative = np.concatenate([[0.0], np.cumsum(np.diff(edges) * inside)])
    return np.asarray(np.interp(times, edges, cumulative))


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Seconds covered by both disjoint sorted sets."""
    if not len(a) or not len(b):
        return 0.0
    return float((covered_before(b, a[:, 1]) - covered_before(b, a[:, 0])).sum())


def gaps(intervals: np.ndarray, start: float, end: float) -> np.ndarray:
    """The parts of ``[start, end)`` the disjoint sorted ``intervals`` leave uncovered."""
    if end <= start:
        return EMPTY
    clipped = np.clip(intervals, start, end) if len(intervals) else EMPTY
    gap_starts = np.concatenate([[start], clipped[:, 1]])
    gap_ends = np.concatenate([clipped[:, 0], [end]])
    keep = gap_ends > gap_starts
    return np.column_stack([gap_starts[keep], gap_ends[keep]])


def intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The parts covered by both disjoint sorted sets, disjoint and sorted (touching intervals share
    nothing): each interval of ``b`` meets the run of ``a``'s that end after its start and start
    before its end, so the pairs to clip are at most as many as both sets' intervals."""
    if not len(a) or not len(b):
        return EMPTY
    lo = np.searchsorted(a[:, 1], b[:, 0], "right")
    hi = np.searchsorted(a[:, 0], b[:, 1], "left")
    counts = np.maximum(hi - lo, 0)
    j = np.repeat(np.arange(len(b)), counts)
    i = np.arange(len(j)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    starts, ends = np.maximum(a[i, 0], b[j, 0]), np.minimum(a[i, 1], b[j, 1])
    keep = ends > starts
    return np.column_stack([starts[keep], ends[keep]])


def minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The parts of disjoint sorted ``a`` that disjoint sorted ``b`` does not cover."""
    if not len(a) or not len(b):
        return a
    return intersection(a, gaps(b, float(a[0, 0]), float(a[-1, 1])))
