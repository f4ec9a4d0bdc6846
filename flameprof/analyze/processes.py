"""Analysis across the processes of a merged profile (see model/merge.py): what the DataLoader workers did
while a training loop waited for batches, and each rank's step time and phases, naming the slowest.

A sample's process is its stack's root frame (kind ``process``). A loop process is ``main`` or a
``rank N``; its workers are the ``dataloader worker N`` processes of the same rank (``rank N:
dataloader worker M``) or, without ranks, all of them. The loop and its steps come from
``steps.py`` on the loop process's own samples, so the phase rules are the same as everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from . import intervals
from .breakdown import stack_has
from .phases import Rule, phase_of_samples, profile_rules
from .steps import find_steps, loop_thread

_WAIT = LEAF_PHASES.index("data.wait")
_COMM = LEAF_PHASES.index("comm")
_FETCHER = "torch/utils/data/_utils/fetch.py"  # where a worker runs the dataset and collate
_RANK = re.compile(r"^rank \d+$")
_WORKER = re.compile(r"^(?:(rank \d+): )?dataloader worker (\d+)")
_HOST = re.compile(r" on \S+$")
_COMPUTE = [LEAF_PHASES.index(p) for p in ("forward", "backward", "optimizer", "sync")]


@dataclass
class WorkerActivity:
    """One DataLoader worker during its loop's ``data.wait``: seconds in the fetcher (the dataset and
    collate: busy) or elsewhere (waiting for indices, sending batches, starting: idle)."""

    role: str
    busy: float
    idle: float


@dataclass
class LoopProcess:
    """A process that runs a training/inference loop (``main`` or a rank)."""

    role: str
    steps: int = 0
    step_p50: float = 0.0  # steady-state median step, seconds
    phase_per_step: dict[str, float] = field(default_factory=dict)  # steady-state seconds per step
    cpu_per_step: float = 0.0
    # steady-state seconds per step the loop thread waited for the other ranks: in a collective it
    # calls from Python (phase ``comm``), or off-CPU inside forward, backward, optimizer or sync
    # (DDP's all_reduce waits in C++ at the end of backward, where the Python stack shows only backward)
    wait_per_step: float = 0.0
    data_wait: float = 0.0  # loop thread, whole run
    workers: list[WorkerActivity] = field(default_factory=list)


@dataclass
class ProcessAnalysis:
    loops: list[LoopProcess]
    straggler: str | None = None  # the rank with the most work of its own per step, when there are several
    fastest: str | None = None
    excess: float = 0.0  # straggler's own work per step over the fastest rank's, as a fraction
    slow_phase: str | None = None  # the phase where the straggler spends most more than the fastest


def sample_processes(profile: Profile) -> tuple[list[str], np.ndarray]:
    """(process labels, label index per sample; -1 where a sample has no process root)."""
    parents = profile.stack_parent.tolist()
    frames = profile.stack_frame.tolist()
    root = [0] * len(parents)
    for i, (parent, frame) in enumerate(zip(parents, frames)):
        root[i] = frame if parent < 0 else root[parent]
    labels: list[str] = []
    index: dict[int, int] = {}
    stack_label = np.full(len(parents) + 1, -1, dtype=np.int64)
    for i, fid in enumerate(root):
        if profile.frames[fid].kind == "process":
            if fid not in index:
                index[fid] = len(labels)
                labels.append(profile.frames[fid].name)
            stack_label[i + 1] = index[fid]
    return labels, stack_label[profile.sample_stack + 1]


def _loop_key(label: str) -> str | None:
    """The loop a process belongs to: ``main`` and its workers, or ``rank N`` and its workers."""
    bare = _HOST.sub("", label)
    worker = _WORKER.match(bare)
    if worker:
        return worker.group(1) or "main"
    if _RANK.match(bare):
        return bare
    return "main" if bare.startswith("main") else None


def analyze_processes(
    profile: Profile, rules: Sequence[Rule] = (), sample_phase: np.ndarray | None = None
) -> ProcessAnalysis | None:
    """Per loop process: steps, phases per step, CPU per step and its workers' activity while it
    waited for data; None for a profile of one process. ``sample_phase``: the samples' phases when
    the caller has them classified already (with the same ``rules``)."""
    labels, of_sample = sample_processes(profile)
    if len(labels) < 2:
        return None
    phases = (
        phase_of_samples(profile, profile_rules(profile, rules)) if sample_phase is None else sample_phase
    )
    loops: dict[str, LoopProcess] = {}
    workers: dict[str, list[str]] = {}
    for label in labels:
        key = _loop_key(label)
        if key is None:
            continue
        if _WORKER.match(_HOST.sub("", label)):
            workers.setdefault(key, []).append(label)
        else:
            loops.setdefault(key, LoopProcess(label))
    fetching = np.append(stack_has(profile, lambda f: f.file.replace("\\", "/").endswith(_FETCHER)), False)
    for key, loop in loops.items():
        mask = of_sample == labels.index(loop.role)
        waits = _measure_loop(profile, phases, mask, loop)
        for label in workers.get(key, []):
            worker = of_sample == labels.index(label)
            loop.workers.append(
                _worker_activity(profile, fetching[profile.sample_stack], worker, label, waits)
            )
    result = ProcessAnalysis(list(loops.values()))
    ranks = [loop for loop in result.loops if _RANK.match(_HOST.sub("", loop.role)) and loop.steps]
    if len(ranks) >= 2:
        # Ranks that synchronise every step have the same step time: the straggler is the one with
        # the most work of its own, the others wait for it.
        slow = max(ranks, key=own_work)
        fast = min(ranks, key=own_work)
        result.straggler, result.fastest = slow.role, fast.role
        result.excess = own_work(slow) / own_work(fast) - 1.0 if own_work(fast) > 0 else 0.0
        gaps = {p: t - fast.phase_per_step.get(p, 0.0) for p, t in slow.phase_per_step.items()}
        result.slow_phase = max(gaps, key=gaps.__getitem__) if gaps and max(gaps.values()) > 0 else None
    return result


def own_work(loop: LoopProcess) -> float:
    """A rank's steady step time less its waits for the other ranks."""
    return max(loop.step_p50 - loop.wait_per_step, 0.0)


def _measure_loop(profile: Profile, phases: np.ndarray, mask: np.ndarray, loop: LoopProcess) -> np.ndarray:
    """Fill ``loop``'s steps and phases; returns its data.wait intervals (merged, ``intervals.py``)."""
    sub = _only(profile, mask)
    sub_phases = phases[mask]
    thread = loop_thread(sub, sub_phases)
    if thread < 0:
        return intervals.EMPTY
    table = find_steps(sub, sub_phases, thread)
    on_loop = sub.sample_thread == thread
    steady = table.steady
    if table.count and steady.any():
        loop.steps = int(steady.sum())
        loop.step_p50 = float(np.median(table.walls[steady]))
        per_step = table.steady_phase_seconds() / loop.steps
        loop.phase_per_step = {name: float(s) for name, s in zip(LEAF_PHASES, per_step) if s > 0}
        first, last = table.bounds[int(np.argmax(steady))], table.bounds[-1]
        in_steady = on_loop & (sub.sample_time >= first) & (sub.sample_time <= last)
        loop.cpu_per_step = float(sub.sample_cpu[in_steady].sum()) / loop.steps
        collective = in_steady & (sub_phases == _COMM)
        compute = in_steady & np.isin(sub_phases, _COMPUTE)
        off_cpu = np.maximum(sub.sample_wall[compute] - sub.sample_cpu[compute], 0.0).sum()
        loop.wait_per_step = float(sub.sample_wall[collective].sum() + off_cpu) / loop.steps
    waiting = on_loop & (sub_phases == _WAIT)
    loop.data_wait = float(sub.sample_wall[waiting].sum())
    return intervals.merged(sub.sample_time[waiting] - sub.sample_wall[waiting], sub.sample_time[waiting])


def _worker_activity(
    profile: Profile, fetching: np.ndarray, mask: np.ndarray, label: str, waits: np.ndarray
) -> WorkerActivity:
    """Seconds of the worker's busiest thread inside the wait intervals, in the fetcher or not."""
    threads = profile.sample_thread[mask]
    if not len(threads):
        return WorkerActivity(label, 0.0, 0.0)
    busiest = np.bincount(threads, weights=profile.sample_wall[mask]).argmax()
    own = mask & (profile.sample_thread == busiest)
    begun = profile.sample_time[own] - profile.sample_wall[own]
    overlap = intervals.covered_before(waits, profile.sample_time[own]) - intervals.covered_before(
        waits, begun
    )
    busy = fetching[own]
    return WorkerActivity(label, float(overlap[busy].sum()), float(overlap[~busy].sum()))


def _only(profile: Profile, mask: np.ndarray) -> Profile:
    """``profile`` with only the samples of ``mask`` (tables shared; marks of those samples' threads)."""
    threads = set(np.unique(profile.sample_thread[mask]).tolist())
    return Profile(
        profile.frames,
        profile.stack_parent,
        profile.stack_frame,
        profile.threads,
        profile.processes,
        profile.sample_time[mask],
        profile.sample_thread[mask],
        profile.sample_stack[mask],
        profile.sample_wall[mask],
        profile.sample_cpu[mask],
        [m for m in profile.marks if m.thread in threads],
        {},
        profile.meta,
        sample_gil=profile.sample_gil[mask],
    )


def process_lines(result: ProcessAnalysis) -> list[str]:
    """Lines of text for the summary and the report."""
    lines = []
    for loop in result.loops:
        if loop.workers and loop.data_wait > 0:
            busy = sum(w.busy for w in loop.workers)
            idle = sum(w.idle for w in loop.workers)
            share = busy / (busy + idle) if busy + idle > 0 else 0.0
            lines.append(
                f"{loop.role} waited {loop.data_wait:.2f} s for batches; meanwhile its "
                f"{len(loop.workers)} DataLoader worker(s) were busy {100 * share:.0f}% of the time "
                f"("
                + ", ".join(
                    f"{w.role.split(': ')[-1]} {w.busy:.2f} s busy / {w.idle:.2f} s idle"
                    for w in loop.workers
                )
                + ")"
            )
        if loop.steps and _RANK.match(_HOST.sub("", loop.role)):
            phases = ", ".join(f"{name} {1e3 * s:.1f}" for name, s in loop.phase_per_step.items())
            lines.append(
                f"{loop.role}: {loop.steps} steady steps, p50 {1e3 * loop.step_p50:.1f} ms "
                f"(ms per step: {phases}; CPU {1e3 * loop.cpu_per_step:.1f})"
            )
    if result.straggler is not None:
        slow = next(loop for loop in result.loops if loop.role == result.straggler)
        fast = next(loop for loop in result.loops if loop.role == result.fastest)
        where = ""
        if result.slow_phase is not None:
            gap = slow.phase_per_step[result.slow_phase] - fast.phase_per_step.get(result.slow_phase, 0.0)
            where = f"; its {result.slow_phase} is {1e3 * gap:.1f} ms slower per step than {fast.role}'s"
        waiting = ", ".join(
            f"{loop.role} {1e3 * loop.wait_per_step:.1f} ms{_in_collectives(loop)}"
            for loop in result.loops
            if loop is not slow and loop.steps and _RANK.match(_HOST.sub("", loop.role))
        )
        lines.append(
            f"slowest rank: {slow.role}, {1e3 * own_work(slow):.1f} ms of its own work per step, "
            f"{100 * result.excess:.0f}% more than {fast.role}{where}; the other ranks wait for it "
            f"(per step: {waiting})"
        )
    return lines


def _in_collectives(loop: LoopProcess) -> str:
    """How much of a rank's wait is in collectives it calls from Python (the rest is off-CPU inside
    other phases, as DDP's all_reduce in backward)."""
    comm = loop.phase_per_step.get("comm", 0.0)
    return f" ({1e3 * comm:.1f} in collectives)" if comm >= 5e-5 else ""


@dataclass
class ProcessesSection:
    """The report's cross-process section: each loop process, the straggler among the ranks, and the
    findings in sentences (``lines``)."""

    loops: list[LoopProcess]
    straggler: str | None
    fastest_rank: str | None
    straggler_excess_percent: float
    straggler_phase: str | None
    lines: list[str]


def processes_section(result: ProcessAnalysis | None) -> ProcessesSection | None:
    """The cross-process analysis for the report; None for a profile of one process."""
    if result is None:
        return None
    return ProcessesSection(
        result.loops,
        result.straggler,
        result.fastest,
        round(100 * result.excess, 3),
        result.slow_phase,
        process_lines(result),
    )
