"""The GIL per thread: the share of its time it held the GIL, waited for it, ran without it (C code
that let it go) and the rest (blocked or idle), from the GIL state the C sampler records with each
sample (``model/records.py``: ``GIL_*``; how it is read: ``native/sampler.c``, ``gil_states``).

Held and waiting are the wall time of the samples in that state at their tick. Running without the
GIL is what the thread's CPU clock counted beyond its time holding it, at most its time neither
holding nor waiting; the rest of that time it was blocked or idle. Samples whose state is unknown
(the pure-Python sampler's, other tools') are left out; a profile with none known has no section.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.profile import Profile
from ..model.records import GIL_HELD, GIL_NOT_HELD, GIL_UNKNOWN, GIL_WAITING
from .threads import thread_label


@dataclass(frozen=True)
class GilThread:
    """One thread's time by its part of the GIL, in percent of ``seconds``."""

    thread: str
    samples: int  # with a known GIL state
    seconds: float  # their wall time
    held: float
    waiting: float
    without: float  # running C code that let the GIL go
    other: float  # blocked or idle


@dataclass(frozen=True)
class GilSection:
    threads: list[GilThread]  # the threads with samples of a known state, the most held and waited first
    unknown_samples: int  # samples whose state is unknown (left out)


def gil_section(profile: Profile) -> GilSection | None:
    """Every thread's shares of the GIL, or None when no sample's GIL state is known."""
    known = profile.sample_gil != GIL_UNKNOWN
    if not known.any():
        return None
    n = len(profile.threads)
    thread, state, wall = profile.sample_thread[known], profile.sample_gil[known], profile.sample_wall[known]

    def per_thread(weights: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is not None:
            return np.bincount(thread[mask], weights=weights[mask], minlength=n)
        return np.bincount(thread, weights=weights, minlength=n)

    total = per_thread(wall)
    held = per_thread(wall, state == GIL_HELD)
    waiting = per_thread(wall, state == GIL_WAITING)
    neither = per_thread(wall, state == GIL_NOT_HELD)
    cpu = per_thread(profile.sample_cpu[known])
    without = np.clip(cpu - held, 0.0, neither)
    samples = np.bincount(thread, minlength=n)
    several = len({t.pid for t in profile.threads}) > 1
    rows = []
    for i in np.argsort(-(held + waiting), kind="stable").tolist():
        if total[i] <= 0:
            continue
        info = profile.threads[i]
        name = thread_label(profile, i) if several else f"{info.name or 'thread'} (tid {info.tid})"

        def pct(seconds: float, i: int = i) -> float:
            return float(100.0 * seconds / total[i])

        rows.append(
            GilThread(
                name,
                int(samples[i]),
                float(total[i]),
                pct(held[i]),
                pct(waiting[i]),
                pct(without[i]),
                pct(neither[i] - without[i]),
            )
        )
    return GilSection(rows, int((~known).sum()))
