"""One step next to the steady-state average: its phases, layers and (when the traced window covers
it) ops, and for the notable steps (warm-up and the slowest) the phase and the layer that grew.

A sample belongs to the step whose interval holds its time, on the loop thread; a layer's time in a
step is its self time there (samples whose innermost layer frame it is), as the report's layer
table counts it. The average is over the steady-state steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.trace import OP
from .ancestry import Ancestry
from .breakdown import Analysis
from .ops import op_times

SLOWEST = 3  # steady-state steps named among the notable ones
TOP = 10


@dataclass(frozen=True)
class Change:
    """A phase, layer or op: its seconds in the step and per steady-state step on average."""

    name: str
    step: float
    average: float


@dataclass(frozen=True)
class NotableStep:
    kind: str  # warm-up or slowest
    index: int  # 1-based
    wall: float
    phases: dict[str, float]  # seconds per leaf phase
    grew_phase: Change | None  # the phase that grew most over the average, if any grew
    grew_layer: Change | None


@dataclass(frozen=True)
class StepDetail:
    """``report --step N``: the step's wall time, phases, layers and ops beside the average's."""

    index: int  # 1-based
    warmup: bool
    wall: float
    average_wall: float
    phases: list[Change]
    layers: list[Change]  # the step's top layers by self time, and the average's
    ops: list[Change] | None  # None when the traced window did not cover the step


class StepLayers:
    """Each loop-thread sample's step and innermost layer, for layer seconds per step."""

    def __init__(self, analysis: Analysis) -> None:
        profile, steps = analysis.profile, analysis.steps
        self.names = sorted({f.name for f in profile.frames if f.kind == "layer"})
        index = {name: i for i, name in enumerate(self.names)}
        key = np.array(
            [index.get(f.name, -1) if f.kind == "layer" else -1 for f in profile.frames], dtype=np.int64
        )
        loop = np.flatnonzero(profile.sample_thread == steps.thread)
        stacks = profile.sample_stack[loop]
        inner = np.full(len(loop), -1, dtype=np.int64)
        if len(profile.stack_parent) and len(key):
            tree = analysis.ancestry or Ancestry(profile.stack_parent)
            per_stack = tree.innermost(key[profile.stack_frame])
            inner[stacks >= 0] = per_stack[stacks[stacks >= 0]]
        # a sample stands for the interval ending at its time (one at a bound belongs to the step before)
        step = np.searchsorted(steps.bounds, profile.sample_time[loop], "left") - 1
        keep = (inner >= 0) & (step >= 0) & (step < steps.count)
        self.step, self.layer, self.wall = step[keep], inner[keep], profile.sample_wall[loop][keep]
        steady = steps.steady[self.step] if steps.count else np.zeros(0, dtype=bool)
        count = max(int(steps.steady.sum()), 1)
        self.average = np.bincount(self.layer[steady], self.wall[steady], len(self.names)) / count

    def of_step(self, k: int) -> np.ndarray:
        """Seconds per layer in step ``k`` (0-based)."""
        at = self.step == k
        seconds: np.ndarray = np.bincount(self.layer[at], self.wall[at], len(self.names))
        return seconds


def _grew(names: list[str], step: np.ndarray, average: np.ndarray) -> Change | None:
    growth = step - average
    if not len(growth) or growth.max() <= 0:
        return None
    i = int(growth.argmax())
    return Change(names[i], float(step[i]), float(average[i]))


def notable_steps(analysis: Analysis, layers: StepLayers) -> list[NotableStep]:
    """The warm-up steps and the slowest steady-state ones, each with what grew over the average."""
    steps = analysis.steps
    if not steps.count:
        return []
    walls = steps.walls
    steady = np.flatnonzero(steps.steady)
    slowest = sorted(steady[np.argsort(-walls[steady], kind="stable")[:SLOWEST]].tolist())
    average = steps.steady_phase_seconds() / max(len(steady), 1)
    out = []
    for kind, k in [("warm-up", k) for k in range(steps.warmup)] + [("slowest", k) for k in slowest]:
        phases = steps.phase_seconds[k]
        out.append(
            NotableStep(
                kind,
                k + 1,
                float(walls[k]),
                dict(zip(LEAF_PHASES, phases.tolist())),
                _grew(list(LEAF_PHASES), phases, average),
                _grew(layers.names, layers.of_step(k), layers.average),
            )
        )
    return out


def step_detail(analysis: Analysis, layers: StepLayers, number: int) -> StepDetail:
    """Step ``number`` (1-based) beside the steady-state average; ValueError when there is none."""
    steps = analysis.steps
    if not 1 <= number <= steps.count:
        raise ValueError(f"no step {number}: the profile has {steps.count} steps (1 to {steps.count})")
    k = number - 1
    count = max(int(steps.steady.sum()), 1)
    average = steps.steady_phase_seconds() / count
    phases = [Change(p, float(s), float(a)) for p, s, a in zip(LEAF_PHASES, steps.phase_seconds[k], average)]
    seconds = layers.of_step(k)
    order = np.argsort(-np.maximum(seconds, layers.average), kind="stable")[:TOP]
    top = [Change(layers.names[i], float(seconds[i]), float(layers.average[i])) for i in order.tolist()]
    walls = steps.walls
    return StepDetail(
        number,
        k < steps.warmup,
        float(walls[k]),
        float(walls[steps.steady].mean()) if steps.steady.any() else 0.0,
        phases,
        [c for c in top if c.step > 0 or c.average > 0],
        _step_ops(analysis, float(steps.bounds[k]), float(steps.bounds[k + 1])),
    )


def _step_ops(analysis: Analysis, start: float, end: float) -> list[Change] | None:
    """The ops' self time in [start, end) next to their mean per traced step; None when the traced
    window has no op there."""
    trace = analysis.profile.trace
    if trace is None or not trace.num_events:
        return None
    ev = trace.events
    ops = ev["kind"] == OP
    inside = ops & (ev["start"] >= start) & (ev["start"] < end)
    if not inside.any():
        return None
    self_time = op_times(trace).self_time
    traced_steps = max(len(trace.steps), 1)
    step: dict[str, float] = defaultdict(float)
    average: dict[str, float] = defaultdict(float)
    for i in np.flatnonzero(ops).tolist():
        name = trace.names[int(ev["name"][i])]
        average[name] += float(self_time[i]) / traced_steps
        if inside[i]:
            step[name] += float(self_time[i])
    names = sorted(set(step), key=lambda n: -step[n])[:TOP]
    return [Change(n, step[n], average[n]) for n in names]
