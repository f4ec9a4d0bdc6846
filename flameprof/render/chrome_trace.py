"""Chrome trace / Perfetto JSON: the profile as a timeline.

Per thread, the timestamped samples become nested begin/end ("B"/"E") events: consecutive
samples with the same stack are one span, and a frame stays open while consecutive stacks share
it. Next to each thread, a track of its layer scopes and one of its phases; a steps track per
process; a traced window's ops and kernels on tracks of their own (trace_tracks.py); counter tracks
for CPU %, RSS, the torch allocator and the GPU. Times are microseconds from the start of the run.

The events are computed with numpy (the walk from one stack to the next goes up to their common
ancestor and down again) and streamed to the output, so a million samples take seconds and the
memory of a few arrays, not of the whole JSON text.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import IO

import numpy as np

from ..analyze.threads import process_label
from ..errors import FlameprofError
from ..model.counters import (
    CPU_PERCENT,
    GPU_MEMORY_BYTES,
    GPU_UTIL_PERCENT,
    PAGE_FAULTS_PER_S,
    RSS_BYTES,
    SYSTEM_CPU_PERCENT,
    TORCH_ALLOCATED_BYTES,
    TORCH_RESERVED_BYTES,
)
from ..model.frames import Labeler
from ..model.profile import Profile
from .trace_tracks import trace_track_events

_MIB = 1.0 / (1 << 20)
_COUNTERS = {
    CPU_PERCENT: ("CPU %", 1.0),
    SYSTEM_CPU_PERCENT: ("CPU in the kernel %", 1.0),
    PAGE_FAULTS_PER_S: ("page faults/s", 1.0),
    RSS_BYTES: ("RSS (MiB)", _MIB),
    TORCH_ALLOCATED_BYTES: ("torch allocated (MiB)", _MIB),
    TORCH_RESERVED_BYTES: ("torch reserved (MiB)", _MIB),
    GPU_UTIL_PERCENT: ("GPU util %", 1.0),
    GPU_MEMORY_BYTES: ("GPU memory (MiB)", _MIB),
}
_SCOPE_KINDS = ("layer", "scope")
_CHUNK = 100_000


class NodeTree:
    """A parent-pointer tree whose node 0 is the empty root; ``names[i]`` is node i's JSON-quoted name."""

    def __init__(self, parent: np.ndarray, names: list[str]) -> None:
        self.parent = np.asarray(parent, dtype=np.int64)
        self.names = names
        depth = [0] * len(parent)
        for i, p in enumerate(self.parent.tolist()[1:], 1):  # parents precede children
            depth[i] = depth[p] + 1
        self.depth = np.asarray(depth, dtype=np.int64)

    def common_ancestor(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per pair, the deepest node that is an ancestor of (or equal to) both.

        Each round moves only the pairs still apart one level up, so the work is the length of the
        paths walked, not the number of pairs times the depth of the deepest stack."""
        a, b = a.copy(), b.copy()
        parent, depth = self.parent, self.depth
        for x, y in ((a, b), (b, a)):
            i = np.flatnonzero(depth[x] > depth[y])
            while len(i):
                x[i] = parent[x[i]]
                i = i[depth[x[i]] > depth[y[i]]]
        i = np.flatnonzero(a != b)
        while len(i):
            a[i] = parent[a[i]]
            b[i] = parent[b[i]]
            i = i[a[i] != b[i]]
        return a

    def walk(self, nodes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """Begin/end events of a visit of ``nodes`` over runs [start, end): (time, node, is_begin), in order.

        Between two runs, the nodes below the common ancestor close (deepest first) at the previous
        run's end and the new ones open (shallowest first) at the next run's start.
        """
        src = np.concatenate(([0], nodes))
        dst = np.concatenate((nodes, [0]))
        close_at = np.concatenate(([0.0], ends))
        open_at = np.concatenate((starts, [0.0]))
        stop = self.depth[self.common_ancestor(src, dst)]
        keys, which, begins = [], [], []
        for cursor, is_begin in ((src, False), (dst, True)):
            index = np.flatnonzero(self.depth[cursor] > stop)  # the transitions with a node to visit
            node = cursor[index]
            while len(index):
                keys.append(index)
                which.append(node)
                begins.append(np.full(len(index), is_begin))
                node = self.parent[node]
                deeper = self.depth[node] > stop[index]
                index, node = index[deeper], node[deeper]
        if not keys:
            empty = np.zeros(0)
            return empty, empty.astype(np.int64), empty.astype(bool)
        k, node, begin = np.concatenate(keys), np.concatenate(which), np.concatenate(begins)
        d = self.depth[node]
        order = np.lexsort((np.where(begin, d, -d), begin, k))
        k, node, begin = k[order], node[order], begin[order]
        return np.where(begin, open_at[k], close_at[k]), node, begin


def _runs(
    keys: np.ndarray, times: np.ndarray, walls: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First sample of each run of equal keys, and the runs' start and end times; a run never starts before
    the previous one ended (samples whose intervals overlap would otherwise unbalance the nesting)."""
    first = np.concatenate(([0], np.nonzero(keys[1:] != keys[:-1])[0] + 1))
    last = np.concatenate((first[1:] - 1, [len(keys) - 1]))
    ends = times[last]
    starts = np.maximum(times[first] - walls[first], np.concatenate(([-np.inf], ends[:-1])))
    return first, starts, np.maximum(ends, starts)


def scope_tree(profile: Profile, quote: Callable[[int], str]) -> tuple[NodeTree, np.ndarray]:
    """The tree of layer/scope paths, and per interned stack (index 0: the empty stack) its path's node."""
    is_scope = [f.kind in _SCOPE_KINDS for f in profile.frames]
    ids: dict[tuple[int, int], int] = {}
    parent, names = [0], [""]
    node_of = [0] * (len(profile.stack_parent) + 1)
    for sid, (up, frame) in enumerate(zip(profile.stack_parent.tolist(), profile.stack_frame.tolist())):
        node = node_of[up + 1]
        if is_scope[frame]:
            key = (node, frame)
            child = ids.get(key)
            if child is None:
                child = ids[key] = len(parent)
                parent.append(node)
                names.append(quote(frame))
            node = child
        node_of[sid + 1] = node
    return NodeTree(np.asarray(parent), names), np.asarray(node_of, dtype=np.int64)


class _Writer:
    """Writes trace events as JSON text, one per line."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.first = True

    def lines(self, lines: list[str]) -> None:
        if lines:
            self.out.write(("\n" if self.first else ",\n") + ",\n".join(lines))
            self.first = False

    def meta(self, kind: str, pid: int, tid: int, name: str, sort: int) -> None:
        what = "process_sort_index" if kind == "process_name" else "thread_sort_index"
        self.lines(
            [
                f'{{"ph":"M","name":"{kind}","pid":{pid},"tid":{tid},"args":{{"name":{json.dumps(name)}}}}}',
                f'{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"sort_index":{sort}}}}}',
            ]
        )

    def walk(
        self, pid: int, tid: int, tree: NodeTree, nodes: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        times, which, begin = tree.walk(nodes, starts, ends)
        micros = np.rint(times * 1e6).astype(np.int64)  # whole microseconds: ample at sampling rates
        b, e = f'{{"ph":"B","pid":{pid},"tid":{tid},"ts":', f'{{"ph":"E","pid":{pid},"tid":{tid},"ts":'
        names = tree.names
        for lo in range(0, len(times), _CHUNK):
            hi = lo + _CHUNK
            self.lines(
                [
                    f'{b}{t},"name":{names[n]}}}' if o else f"{e}{t}}}"
                    for t, n, o in zip(micros[lo:hi].tolist(), which[lo:hi].tolist(), begin[lo:hi].tolist())
                ]
            )


def write_chrome_trace(
    profile: Profile,
    out: IO[str],
    sample_phase: np.ndarray | None = None,
    phase_names: Sequence[str] = (),
    steps: Sequence[tuple[int, float, float]] = (),
) -> None:
    """Write the trace JSON to ``out``. ``sample_phase[i]`` indexes ``phase_names`` (-1: none); ``steps``
    are (thread index, start, end) in profile seconds."""
    if profile.num_samples and not np.any(profile.sample_time):
        source = profile.meta.get("source", "this profile")
        raise FlameprofError(
            f"a Chrome trace needs timestamped samples; {source} has none (collapsed stacks carry no time)"
        )
    labeler = Labeler(profile.meta)
    quoted = [json.dumps(labeler.label(f)) for f in profile.frames]
    stacks = NodeTree(
        np.concatenate(([0], profile.stack_parent + 1)),
        [""] + [quoted[f] for f in profile.stack_frame.tolist()],
    )
    scopes, scope_of_stack = scope_tree(profile, quoted.__getitem__)
    phases = NodeTree(np.zeros(len(phase_names) + 1), [""] + [json.dumps(p) for p in phase_names])
    order = np.lexsort((profile.sample_time, profile.sample_thread))
    bounds = np.searchsorted(profile.sample_thread[order], np.arange(len(profile.threads) + 1))
    next_tid = max([t.tid for t in profile.threads] + [0]) + 1
    pids = sorted({t.pid for t in profile.threads} | {p.pid for p in profile.processes})
    main_pid = int(profile.meta.get("pid") or (pids[0] if pids else 0))

    out.write(
        '{"displayTimeUnit":"ms","otherData":'
        + json.dumps(
            {
                "source": "flameprof",
                "argv": profile.meta.get("argv"),
                "start_time": profile.meta.get("start_time"),
            }
        )
        + ',"traceEvents":['
    )
    w = _Writer(out)
    for sort, pid in enumerate(pids):
        w.meta("process_name", pid, 0, process_label(profile, pid), sort)
    for index, info in enumerate(profile.threads):
        rows = order[bounds[index] : bounds[index + 1]]
        if not len(rows):
            continue
        pid, tid, name = info.pid, info.tid, info.name or f"thread {info.tid}"
        times, walls, nodes = (
            profile.sample_time[rows],
            profile.sample_wall[rows],
            profile.sample_stack[rows] + 1,
        )
        w.meta("thread_name", pid, tid, name, 3 * index)
        first, starts, ends = _runs(nodes, times, walls)
        w.walk(pid, tid, stacks, nodes[first], starts, ends)
        scope_nodes = scope_of_stack[nodes]
        if scope_nodes.any():
            w.meta("thread_name", pid, next_tid, f"{name}: layers and scopes", 3 * index + 1)
            first, starts, ends = _runs(scope_nodes, times, walls)
            w.walk(pid, next_tid, scopes, scope_nodes[first], starts, ends)
            next_tid += 1
        if sample_phase is not None:
            w.meta("thread_name", pid, next_tid, f"{name}: phases", 3 * index + 2)
            phase_nodes = np.asarray(sample_phase, dtype=np.int64)[rows] + 1
            first, starts, ends = _runs(phase_nodes, times, walls)
            w.walk(pid, next_tid, phases, phase_nodes[first], starts, ends)
            next_tid += 1

    step_tids: dict[int, int] = {}
    for number, (thread, start, end) in enumerate(steps):
        pid = profile.threads[thread].pid if 0 <= thread < len(profile.threads) else main_pid
        if pid not in step_tids:
            step_tids[pid], next_tid = next_tid, next_tid + 1
            w.meta("thread_name", pid, step_tids[pid], "steps", -1)
        w.lines(
            [
                f'{{"ph":"X","cat":"step","name":"step {number}","pid":{pid},"tid":{step_tids[pid]},'
                f'"ts":{start * 1e6:.1f},"dur":{max(end - start, 0.0) * 1e6:.1f}}}'
            ]
        )
    if profile.trace is not None:
        events = trace_track_events(profile.trace, next_tid, w.meta)
        while chunk := list(itertools.islice(events, _CHUNK)):
            w.lines(chunk)
    for key, (times, values) in sorted(profile.counters.items()):
        label, _, name = key.rpartition(": ")  # a merged profile names them "<process>: <counter>"
        name, dot, device = name.partition(".")  # one series per GPU: gpu_util_percent.0
        if name not in _COUNTERS:
            continue
        title, scale = _COUNTERS[name]
        title = f"{title} GPU {device}" if dot else title
        quoted_title = json.dumps(f"{title} ({label})" if label else title)
        w.lines(
            [
                f'{{"ph":"C","name":{quoted_title},"pid":{main_pid},"ts":{t * 1e6:.1f},'
                f'"args":{{"value":{v * scale:.6g}}}}}'
                for t, v in zip(times.tolist(), values.tolist())
            ]
        )
    out.write("\n]}\n")
