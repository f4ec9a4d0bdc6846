"""Chrome trace / Perfetto JSON: the profile as a timeline.

Per thread, the timestamped samples become nested complete ("X") events: consecutive samples
with the same frames merge into one span, and a frame stays open while consecutive stacks share
it. Next to each thread, a track of its layer scopes and one of its phases; a steps track per
process; counter tracks for CPU % and RSS. Times are microseconds from the start of the run.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np

from ..analyze.threads import process_label
from ..collect.counters import CPU_PERCENT, RSS_BYTES
from ..errors import FlameprofError
from ..frames import Labeler
from ..model import Profile

_COUNTERS = {CPU_PERCENT: ("CPU %", 1.0), RSS_BYTES: ("RSS (MiB)", 1.0 / (1 << 20))}
_SCOPE_KINDS = ("layer", "scope")


def nested_spans(starts: Sequence[float], ends: Sequence[float], paths: Sequence[tuple],
                 emit: Callable[[object, float, float], None]) -> None:
    """Turn runs (start, end, root-first path) into nested spans: ``emit(key, start, end)`` once per span,
    parents before children. A key stays open across runs whose paths share it at the same depth."""
    open_keys: tuple = ()
    open_at: list[int] = []       # index into ``pending`` of each open span
    pending: list[list] = []      # [key, start, end]; end filled in when the span closes
    prev_end = 0.0
    for start, end, path in zip(starts, ends, paths):
        common = 0
        limit = min(len(open_keys), len(path))
        while common < limit and open_keys[common] == path[common]:
            common += 1
        for i in open_at[common:]:
            pending[i][2] = prev_end
        del open_at[common:]
        for key in path[common:]:
            open_at.append(len(pending))
            pending.append([key, start, 0.0])
        open_keys = path
        prev_end = end
    for i in open_at:
        pending[i][2] = prev_end
    for key, start, end in pending:
        emit(key, start, end)


def _runs(keys: np.ndarray, times: np.ndarray, walls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices of the first sample of each run of equal keys, with the runs' start and end times."""
    if not len(keys):
        return keys, times, times
    first = np.concatenate(([0], np.nonzero(keys[1:] != keys[:-1])[0] + 1))
    last = np.concatenate((first[1:] - 1, [len(keys) - 1]))
    return first, times[first] - walls[first], times[last]


def scope_paths(profile: Profile) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per interned stack, the id of its path of layer/scope frames; and those paths."""
    is_scope = [f.kind in _SCOPE_KINDS for f in profile.frames]
    ids: dict[tuple[int, ...], int] = {(): 0}
    paths: list[tuple[int, ...]] = [()]
    full: list[tuple[int, ...]] = []
    out = np.zeros(len(profile.stack_parent) + 1, dtype=np.int64)   # index 0: the empty stack
    for sid, (parent, frame) in enumerate(zip(profile.stack_parent.tolist(), profile.stack_frame.tolist())):
        path = full[parent] if parent >= 0 else ()
        if is_scope[frame]:
            path = path + (frame,)
        full.append(path)
        pid = ids.get(path)
        if pid is None:
            pid = ids[path] = len(paths)
            paths.append(path)
        out[sid + 1] = pid
    return out, paths


class _Trace:
    """Collects trace events as JSON text."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._names: dict[str, str] = {}

    def name(self, text: str) -> str:
        quoted = self._names.get(text)
        if quoted is None:
            quoted = self._names[text] = json.dumps(text)
        return quoted

    def meta(self, kind: str, pid: int, tid: int, name: str, sort: int | None = None) -> None:
        self.events.append(f'{{"ph":"M","name":"{kind}","pid":{pid},"tid":{tid},"args":{{"name":{self.name(name)}}}}}')
        if sort is not None:
            what = "process_sort_index" if kind == "process_name" else "thread_sort_index"
            self.events.append(f'{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"sort_index":{sort}}}}}')

    def span(self, pid: int, tid: int, cat: str, name: str, start: float, end: float) -> None:
        self.events.append(f'{{"ph":"X","cat":"{cat}","name":{self.name(name)},"pid":{pid},"tid":{tid},'
                           f'"ts":{start * 1e6:.1f},"dur":{max(end - start, 0.0) * 1e6:.1f}}}')

    def counter(self, pid: int, name: str, time: float, value: float) -> None:
        self.events.append(f'{{"ph":"C","name":{self.name(name)},"pid":{pid},"ts":{time * 1e6:.1f},'
                           f'"args":{{"value":{value:.6g}}}}}')


def render_chrome_trace(profile: Profile, sample_phase: np.ndarray | None = None,
                        phase_names: Sequence[str] = (),
                        steps: Sequence[tuple[int, float, float]] = ()) -> str:
    """The trace JSON. ``sample_phase[i]`` indexes ``phase_names`` (-1: none); ``steps`` are
    (thread index, start, end) in profile seconds."""
    if profile.num_samples and not np.any(profile.sample_time):
        source = profile.meta.get("source", "this profile")
        raise FlameprofError(f"a Chrome trace needs timestamped samples; {source} has none "
                             "(collapsed stacks carry no time)")
    labeler = Labeler(profile.meta)
    labels = [labeler.label(f) for f in profile.frames]
    trace = _Trace()
    all_frames = profile.all_stack_frames()
    scope_of_stack, scope_list = scope_paths(profile)
    order = np.lexsort((profile.sample_time, profile.sample_thread))
    threads = profile.sample_thread[order]
    bounds = np.searchsorted(threads, np.arange(len(profile.threads) + 1))
    next_tid = max([t.tid for t in profile.threads] + [0]) + 1
    pids = sorted({t.pid for t in profile.threads} | {p.pid for p in profile.processes})
    main_pid = int(profile.meta.get("pid") or (pids[0] if pids else 0))
    for sort, pid in enumerate(pids):
        trace.meta("process_name", pid, 0, process_label(profile, pid), sort)

    for index, info in enumerate(profile.threads):
        pid, tid = info.pid, info.tid
        rows = order[bounds[index]:bounds[index + 1]]
        times, walls = profile.sample_time[rows], profile.sample_wall[rows]
        stacks = profile.sample_stack[rows]
        name = info.name or f"thread {tid}"
        trace.meta("thread_name", pid, tid, name, 3 * index)

        first, starts, ends = _runs(stacks, times, walls)
        paths = [all_frames[s] if s >= 0 else () for s in stacks[first].tolist()]
        nested_spans(starts.tolist(), ends.tolist(), paths,
                     lambda f, a, b: trace.span(pid, tid, "stack", labels[f], a, b))

        scope_keys = scope_of_stack[stacks + 1]
        if np.any(scope_keys):
            scope_tid, next_tid = next_tid, next_tid + 1
            trace.meta("thread_name", pid, scope_tid, f"{name}: layers and scopes", 3 * index + 1)
            first, starts, ends = _runs(scope_keys, times, walls)
            nested_spans(starts.tolist(), ends.tolist(), [scope_list[k] for k in scope_keys[first].tolist()],
                         lambda f, a, b: trace.span(pid, scope_tid, "layer", labels[f], a, b))

        if sample_phase is not None and len(rows):
            phase_tid, next_tid = next_tid, next_tid + 1
            trace.meta("thread_name", pid, phase_tid, f"{name}: phases", 3 * index + 2)
            phases = np.asarray(sample_phase)[rows]
            first, starts, ends = _runs(phases, times, walls)
            for ph, a, b in zip(phases[first].tolist(), starts.tolist(), ends.tolist()):
                if ph >= 0:
                    trace.span(pid, phase_tid, "phase", phase_names[ph], a, b)

    step_tids: dict[int, int] = {}
    for number, (thread, start, end) in enumerate(steps):
        pid = profile.threads[thread].pid if 0 <= thread < len(profile.threads) else main_pid
        if pid not in step_tids:
            step_tids[pid], next_tid = next_tid, next_tid + 1
            trace.meta("thread_name", pid, step_tids[pid], "steps", -1)
        trace.span(pid, step_tids[pid], "step", f"step {number}", start, end)

    for key, (title, scale) in _COUNTERS.items():
        if key in profile.counters:
            times, values = profile.counters[key]
            for t, v in zip(times.tolist(), values.tolist()):
                trace.counter(main_pid, title, t, v * scale)

    meta = json.dumps({"source": "flameprof", "argv": profile.meta.get("argv"),
                       "start_time": profile.meta.get("start_time")})
    return '{"displayTimeUnit":"ms","otherData":' + meta + ',"traceEvents":[\n' + ",\n".join(trace.events) + "\n]}"
