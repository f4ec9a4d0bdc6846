"""Steps: training/inference iterations, their wall time and their time per phase.

Step boundaries come from marks the collector recorded on the loop's thread; a step is the
interval between two consecutive ones. In this order of preference: ``step`` marks (those of
``flameprof.step()``, value ``user``, else the leading optimizer's); ``backward`` marks (each
``Tensor.backward``: a loop that updates its weights by hand); ``forward`` marks (each outermost
module call: an inference loop; of several root modules the one called most, then the one with
most time in its layers); ``batch`` marks (DataLoader batches, the most frequent dataset, e.g. the
training DataLoader rather than the validation one). With optimizer steps and more backward
passes than steps (gradient accumulation), the backward passes are reported as micro-steps.
Without marks, steps are inferred from the samples: the loop moves through data -> forward ->
backward -> optimizer, so a step starts where that order falls back (e.g. optimizer then data).
That needs several samples per step, and the report says those steps are estimates.

Evaluation and checkpointing that fall inside a step's interval are not part of it: a step's wall
time and its steady-state phases leave them out (the run's totals keep them).

Warm-up (the first step, plus the immediately following steps slower than 1.5x the median) is
reported apart; shares and the verdict use the steady state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from ..model.time_windows import windowed_marks
from .phases import CHECKPOINT, DATA_IDS, EVAL

STEP_MARKS = ("step", "backward", "forward", "batch")
_APART = (EVAL, CHECKPOINT)  # phases inside a step's interval that are not part of the step
WARMUP_FACTOR = 1.5
_STAGE = {"data.wait": 0, "data.fetch": 0, "forward": 1, "backward": 2, "optimizer": 3}
# Leaf-phase id -> position in the data/forward/backward/optimizer cycle, -1 for sync, comm and other.
_STAGE_OF_PHASE = np.array([_STAGE.get(p, -1) for p in LEAF_PHASES], dtype=np.int8)


@dataclass
class StepTable:
    """``n`` steps: ``bounds`` (n+1 times, the sample time base), ``phase_seconds`` (n x leaf phases)."""

    source: str  # "marks:step", "marks:backward", "marks:forward", "marks:batch", "samples" or "none"
    thread: int  # the loop's thread (index into profile.threads), -1 when none
    bounds: np.ndarray
    phase_seconds: np.ndarray
    warmup: int  # the first ``warmup`` steps are warm-up
    # steps before ``bounds`` whose marks were folded to bound memory (model/time_windows.py), and when
    # the first of them began: they count, but have no table row
    folded: int = 0
    folded_start: float = 0.0
    micro_steps: int = 0  # backward passes within the steps when more than the steps (accumulation)

    @property
    def start(self) -> float:
        """When the first step began (folded or not); the end of startup."""
        return self.folded_start if self.folded else float(self.bounds[0])

    @property
    def count(self) -> int:
        return max(len(self.bounds) - 1, 0)

    @property
    def walls(self) -> np.ndarray:
        """Each step's wall time, less its evaluation and checkpointing: those are no training."""
        walls: np.ndarray = np.diff(self.bounds) - self.phase_seconds[:, list(_APART)].sum(axis=1)
        return walls

    @property
    def steady(self) -> np.ndarray:
        """Boolean mask of the steady-state steps."""
        mask = np.ones(self.count, dtype=bool)
        mask[: self.warmup] = False
        return mask

    def steady_phase_seconds(self) -> np.ndarray:
        """Seconds per leaf phase summed over the steady-state steps (evaluation and checkpointing 0)."""
        if not self.count:
            return np.zeros(len(LEAF_PHASES))
        seconds: np.ndarray = self.phase_seconds[self.steady].sum(axis=0)
        seconds[list(_APART)] = 0.0
        return seconds


def loop_thread(profile: Profile, phases: np.ndarray) -> int:
    """The thread that runs the training/inference loop: the one with step marks, else the one with
    the most data/forward/backward/optimizer time, else MainThread or the busiest thread; -1 if no samples."""
    marked = [m.thread for m in profile.marks if m.name in STEP_MARKS]
    if marked:
        return int(np.bincount(marked).argmax())
    if not profile.num_samples:
        return -1
    nthreads = max(len(profile.threads), int(profile.sample_thread.max()) + 1)
    dl = _STAGE_OF_PHASE[phases] >= 0
    per_thread = np.bincount(profile.sample_thread[dl], weights=profile.sample_wall[dl], minlength=nthreads)
    if per_thread.max() > 0:
        return int(per_thread.argmax())
    for i, t in enumerate(profile.threads):
        if t.name == "MainThread" and np.any(profile.sample_thread == i):
            return i
    return int(np.bincount(profile.sample_thread, weights=profile.sample_wall, minlength=nthreads).argmax())


def find_steps(profile: Profile, phases: np.ndarray, thread: int) -> StepTable:
    """Steps of ``thread`` with their time per phase (``phases``: leaf-phase id per sample)."""
    sel = profile.sample_thread == thread
    times, walls, ph = profile.sample_time[sel], profile.sample_wall[sel], phases[sel]
    order = np.argsort(times, kind="stable")
    times, walls, ph = times[order], walls[order], ph[order]
    source, bounds, folded = "none", np.zeros(0), []
    for name in STEP_MARKS:
        marks, value = _boundary_marks(profile, name, thread, sel)
        folded = [f for f in windowed_marks(profile.marks, name, thread) if f.value == value]
        if len(marks) >= 2:
            source, bounds = f"marks:{name}", marks
            break
    else:
        bounds = _bounds_from_samples(times, walls, ph)
        if len(bounds) >= 2:
            source = "samples"
    n = max(len(bounds) - 1, 0)
    nph = len(LEAF_PHASES)
    if n:
        # A sample stands for the interval ending at its time: one taken exactly at a bound belongs to the
        # step before.
        idx = np.searchsorted(bounds, times, side="left") - 1
        ok = (idx >= 0) & (idx < n)
        cells = np.bincount(idx[ok] * nph + ph[ok], weights=walls[ok], minlength=n * nph)
        phase_seconds: np.ndarray = cells.reshape(n, nph)
    else:
        phase_seconds = np.zeros((0, nph))
    table = StepTable(source, thread, np.asarray(bounds, dtype=np.float64), phase_seconds, 0)
    table.warmup = warmup_count(table.walls)
    if source == "marks:step" and n:
        backward = _values(profile, "backward", thread).get("", [])
        micro = sum(1 for t in backward if bounds[0] < t <= bounds[-1])
        table.micro_steps = micro if micro > n else 0
    if n and folded:
        # a folded mark stands for marks that each began a step (the last of them ends the first
        # raw step's predecessor): as many folded steps as folded marks
        table.folded = sum(f.count for f in folded)
        table.folded_start = min(f.first for f in folded)
        table.warmup = 0  # warm-up was long ago, among the folded steps
    return table


def _values(profile: Profile, name: str, thread: int) -> dict[str, list[float]]:
    """Times of ``thread``'s ``name`` marks by value."""
    by_value: dict[str, list[float]] = {}
    for m in profile.marks:
        if m.name == name and m.thread == thread:
            by_value.setdefault(m.value, []).append(m.time)
    return by_value


def _boundary_marks(profile: Profile, name: str, thread: int, loop: np.ndarray) -> tuple[np.ndarray, str]:
    """Sorted times of ``thread``'s ``name`` marks of one kind, and that kind's value (see the
    module's docstring for which); ``loop`` flags the thread's samples."""
    by_value = _values(profile, name, thread)
    if not by_value:
        return np.zeros(0), ""
    if name == "step" and "user" in by_value:
        value = "user"
    elif name == "forward":  # the root called most, then the one with most time in its layers
        value = max(by_value, key=lambda v: (len(by_value[v]), _root_seconds(profile, v, loop)))
    else:
        value = max(by_value, key=lambda v: len(by_value[v]))
    return np.sort(np.asarray(by_value[value], dtype=np.float64)), value


def _root_seconds(profile: Profile, root: str, loop: np.ndarray) -> float:
    """Wall seconds of the ``loop`` samples inside the layers of the root module ``root``."""
    mine = [
        f.kind == "layer" and (f.name == root or f.name.startswith((root + ".", root + " ")))
        for f in profile.frames
    ]
    flags: list[bool] = []
    for parent, fid in zip(profile.stack_parent.tolist(), profile.stack_frame.tolist()):
        flags.append(mine[fid] or (parent >= 0 and flags[parent]))
    inside = np.append(np.asarray(flags, dtype=bool), False)[profile.sample_stack]
    return float(profile.sample_wall[loop & inside].sum())


def _bounds_from_samples(times: np.ndarray, walls: np.ndarray, ph: np.ndarray) -> np.ndarray:
    """Step boundaries where the data -> forward -> backward -> optimizer order falls back."""
    stage = _STAGE_OF_PHASE[ph]
    keep = np.nonzero(stage >= 0)[0]
    if len(keep) < 2:
        return np.zeros(0)
    st = stage[keep]
    drops = keep[1:][np.diff(st) < 0]
    if not len(drops):
        return np.zeros(0)
    first, last = keep[0], keep[-1]
    # A bound sits half a sample before the sample that starts a step, so that sample is inside it and
    # the previous one is not; the end sits just after the last sample.
    starts = np.concatenate(([first], drops))
    return np.concatenate((times[starts] - walls[starts] / 2, [np.nextafter(times[last], np.inf)]))


def warmup_count(walls: np.ndarray) -> int:
    """Leading warm-up steps: the first, then the following ones slower than 1.5x the median (at most a
    quarter)."""
    n = len(walls)
    if n < 3:
        return 0
    median = float(np.median(walls))
    count = 1
    while count < n // 4 and walls[count] > WARMUP_FACTOR * median:
        count += 1
    return count


def data_share(seconds: np.ndarray) -> float:
    """Fraction of the summed leaf-phase ``seconds`` spent in data (wait + fetch)."""
    total = float(seconds.sum())
    return float(seconds[list(DATA_IDS)].sum()) / total if total > 0 else 0.0
