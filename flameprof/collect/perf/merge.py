"""Graft perf's native stacks under the Python frames that called them (``run --native``).

The Python sampler knows which Python function a thread was in and how much wall and CPU time
each sample stands for; perf knows which native code the CPU was running. Each perf sample of a
thread is matched to that thread's Python sample whose interval contains it (a Python sample at
time t with wall weight w covers (t - w, t], on the same clock). The native part of a perf stack is
what lies leafward of the innermost interpreter frame (``_PyEval_EvalFrameDefault``, or a Python
perf-trampoline frame): C functions, PyTorch and MKL kernels called from that Python frame. When
unwinding never reached the interpreter (hand-written kernels without unwind tables), the whole
unwound stack is that part.

Weights are split, never added, so the totals stay the Python sampler's: a sample's on-CPU time
(its CPU time, at most its wall time) is shared among the native stacks perf saw in its interval
in proportion to their periods, with its CPU time; the rest (off-CPU time, and perf samples that
were in the interpreter itself) stays on the Python stack. A sample perf saw nothing of is kept
as it was.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...model.builder import ProfileBuilder
from ...model.profile import Profile

EVAL_LOOP = "_PyEval_EvalFrameDefault"


def native_tail(perf: Profile, frame_ids: tuple[int, ...]) -> tuple[int, ...]:
    """The frames of a perf stack (root first) leafward of its innermost interpreter frame."""
    for i in range(len(frame_ids) - 1, -1, -1):
        frame = perf.frames[frame_ids[i]]
        if frame.kind == "python" or frame.name == EVAL_LOOP:
            return frame_ids[i + 1 :]
    return frame_ids


def _seeded_builder(profile: Profile) -> ProfileBuilder:
    """A builder holding the profile's frames and stacks under their existing ids."""
    builder = ProfileBuilder(profile.meta)
    for frame in profile.frames:
        builder.frame(frame)
    for parent, frame_id in zip(profile.stack_parent.tolist(), profile.stack_frame.tolist()):
        builder.stack_id((frame_id,), parent)
    if len(builder.frames) != len(profile.frames) or len(builder.stack_parent) != len(profile.stack_parent):
        raise ValueError("profile has duplicate frames or stacks")
    return builder


def _assign(
    profile: Profile, perf: Profile, pid: int, offset: float
) -> tuple[dict[int, dict[int, float]], int]:
    """Python sample index -> {perf stack id: summed period in seconds} of the perf samples in its interval,
    and how many perf samples found a Python sample."""
    threads = {(t.pid, t.tid): i for i, t in enumerate(profile.threads) if t.pid == pid}
    perf_to_python = np.array([threads.get((t.pid, t.tid), -1) for t in perf.threads] or [-1], dtype=np.int64)
    target = perf_to_python[perf.sample_thread] if perf.num_samples else np.zeros(0, dtype=np.int64)
    perf_time = perf.sample_time + offset
    out: dict[int, dict[int, float]] = {}
    matched = 0
    for thread in np.unique(target[target >= 0]).tolist():
        rows = np.nonzero(profile.sample_thread == thread)[0]
        rows = rows[np.argsort(profile.sample_time[rows], kind="stable")]
        times = profile.sample_time[rows]
        starts = times - profile.sample_wall[rows]
        mine = np.nonzero(target == thread)[0]
        slot = np.searchsorted(times, perf_time[mine], side="left")
        inside = slot < len(rows)
        inside[inside] = starts[slot[inside]] < perf_time[mine][inside]
        matched += int(inside.sum())
        for sample, perf_row in zip(rows[slot[inside]].tolist(), mine[inside].tolist()):
            stacks = out.setdefault(sample, {})
            stack = int(perf.sample_stack[perf_row])
            stacks[stack] = stacks.get(stack, 0.0) + float(perf.sample_wall[perf_row])
    return out, matched


def merge_native(profile: Profile, perf: Profile, pid: int, offset: float) -> Profile:
    """``profile`` with perf's native frames grafted under the Python frames of process ``pid``.

    ``offset`` turns perf's sample times into the profile's: perf's time origin (``meta['time_origin']``
    of ``read_perf_script``, on the monotonic clock) minus the clock reading of the profile's time 0.
    """
    assigned, matched = _assign(profile, perf, pid, offset)
    builder = _seeded_builder(profile)
    tails: dict[int, tuple[int, ...]] = {}
    frame_map: dict[int, int] = {}
    grafts: dict[tuple[int, tuple[int, ...]], int] = {}

    def tail_of(perf_stack: int) -> tuple[int, ...]:
        tail = tails.get(perf_stack)
        if tail is None:
            mapped = []
            # the frames of this one stack, from a walk up its parents: a table of every prefix's
            # frames would be quadratic in the depth of a deep stack
            for f in native_tail(perf, tuple(perf.stack_frames(perf_stack))) if perf_stack >= 0 else ():
                fid = frame_map.get(f)
                if fid is None:
                    fid = frame_map[f] = builder.frame(perf.frames[f])
                mapped.append(fid)
            tail = tails[perf_stack] = tuple(mapped)
        return tail

    time, thread, stack = (
        profile.sample_time.tolist(),
        profile.sample_thread.tolist(),
        profile.sample_stack.tolist(),
    )
    wall, cpu, gil = profile.sample_wall.tolist(), profile.sample_cpu.tolist(), profile.sample_gil.tolist()
    columns: tuple[list, list, list, list, list, list] = ([], [], [], [], [], [])
    grafted = 0

    def emit(i: int, sid: int, w: float, c: float) -> None:
        for column, value in zip(columns, (time[i], thread[i], sid, w, c, gil[i])):
            column.append(value)

    for i in range(len(stack)):
        seen = assigned.get(i)
        if not seen:
            emit(i, stack[i], wall[i], cpu[i])
            continue
        total = sum(seen.values())
        on_cpu = min(wall[i], cpu[i] if cpu[i] > 0 else total)
        own_wall, own_cpu = wall[i] - on_cpu, 0.0
        by_tail: dict[tuple[int, ...], float] = {}
        for perf_stack, period in seen.items():
            tail = tail_of(perf_stack)
            by_tail[tail] = by_tail.get(tail, 0.0) + period / total
        for tail, share in by_tail.items():
            if not tail:
                own_wall += on_cpu * share
                own_cpu += cpu[i] * share
                continue
            key = (stack[i], tail)
            sid = grafts.get(key)
            if sid is None:
                sid = grafts[key] = builder.stack_id(tail, stack[i])
            emit(i, sid, on_cpu * share, cpu[i] * share)
            grafted += 1
        if own_wall > 0 or own_cpu > 0:
            emit(i, stack[i], own_wall, own_cpu)

    meta = dict(
        profile.meta,
        native={
            "collector": "perf",
            "event": perf.meta.get("event", ""),
            "perf_samples": perf.num_samples,
            "matched_perf_samples": matched,
            "python_samples_with_native": len(assigned),
            "native_rows": grafted,
        },
    )
    return dataclasses.replace(
        profile,
        frames=list(builder.frames),
        stack_parent=np.asarray(builder.stack_parent, dtype=np.int32),
        stack_frame=np.asarray(builder.stack_frame, dtype=np.int32),
        sample_time=np.asarray(columns[0]),
        sample_thread=np.asarray(columns[1]),
        sample_stack=np.asarray(columns[2]),
        sample_wall=np.asarray(columns[3]),
        sample_cpu=np.asarray(columns[4]),
        sample_gil=np.asarray(columns[5], dtype=np.uint8),
        meta=meta,
    )
