"""Firefox Profiler JSON: the profile in the profiler's *processed* format, version 70.

The processed format is what the Firefox Profiler loads without converting, so every track, marker and
category arrives as written. Its tables are columns; since version 66 stacks store ``prefixOffset``
(own index minus parent index, 0 for a root), since 70 the library sits on the frame. Stacks, frames,
functions and strings are shared by all threads (``profile.shared``).

What goes where: one thread per profiled thread, grouped into processes by pid (roles in the names);
a process the profile knows but never sampled gets an empty thread so it still has a track. Samples
keep their time and weight (wall or CPU milliseconds, or counts) and their CPU delta in microseconds.
A stack's phase is its frame's category and its innermost layer the subcategory, so the Firefox
Profiler's category graph and sidebar show phases and layers. Markers: the steps, each run of
samples in one phase, data waits and syncs (on the timeline), the profile's marks, and the traced
window's ops and kernels (kernels on one thread per device stream).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from ..analyze.phases import RULE_PHASES
from ..analyze.threads import process_label
from ..errors import FlameprofError
from ..model.frames import Labeler
from ..model.phase_names import PHASES
from ..model.profile import Profile
from ..model.trace import DEVICE_KINDS, EVENT_KINDS

PROCESSED_PROFILE_VERSION = 70  # src/app-logic/constants.ts of the Firefox Profiler
GECKO_PROFILE_VERSION = 36  # meta.version: the Gecko format the processed one derives from
WAIT_PHASES = ("data.wait", "sync")  # phases shown as their own markers on the timeline
_COLORS = {
    "data.wait": "yellow",
    "data.fetch": "orange",
    "forward": "blue",
    "backward": "green",
    "optimizer": "purple",
    "sync": "red",
    "comm": "magenta",
    "eval": "lightblue",
    "checkpoint": "brown",
    "other": "grey",  # grey marks the default category
}
_ALL = ["marker-chart", "marker-table"]
_SCHEMAS = [
    {
        "name": "Step",
        "display": [*_ALL, "timeline-overview"],
        "fields": [{"key": "step", "format": "integer"}],
    },
    {"name": "Phase", "display": _ALL, "fields": [{"key": "phase", "format": "string"}]},
    {
        "name": "Wait",
        "display": [*_ALL, "timeline-overview"],
        "fields": [{"key": "phase", "format": "string"}],
    },
    {"name": "Mark", "display": _ALL, "fields": [{"key": "value", "format": "string"}]},
    {
        "name": "TracedEvent",
        "tableLabel": "{marker.name} ({marker.data.layer})",
        "display": _ALL,
        "fields": [
            {"key": "kind", "format": "string"},
            {"key": "layer", "format": "string"},
            {"key": "phase", "format": "string"},
            {"key": "shapes", "format": "string"},
            {"key": "flops", "format": "integer"},
            {"key": "bytes", "format": "bytes"},
        ],
    },
]
INSTANT, INTERVAL = 0, 1


class _Strings:
    """The shared string table: each string once, referred to by index."""

    def __init__(self) -> None:
        self.array: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.array)
            self.array.append(text)
        return index


def _table(columns: dict[str, list]) -> dict:
    lengths = {len(c) for c in columns.values()}
    return {**columns, "length": lengths.pop() if lengths else 0}


class _Markers:
    """One thread's marker table, built row by row; times in profile seconds, written as milliseconds."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float | None, int, int, dict | None]] = []

    def add(self, name: int, start: float, end: float | None, category: int, data: dict | None) -> None:
        phase = INSTANT if end is None else INTERVAL
        self.rows.append((name, start * 1e3, None if end is None else end * 1e3, phase, category, data))

    def table(self) -> dict:
        cols = list(zip(*self.rows)) or [()] * 6
        keys = ("name", "startTime", "endTime", "phase", "category", "data")
        return _table({k: list(c) for k, c in zip(keys, cols)})


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last index of each run of equal consecutive ``keys``."""
    first = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1)) if len(keys) else keys
    return first, np.concatenate((first[1:] - 1, [len(keys) - 1])) if len(keys) else keys


def _empty_samples(weight_type: str) -> dict:
    return {"stack": [], "time": [], "weight": None, "weightType": weight_type, "length": 0}


def render_firefox(
    profile: Profile,
    mode: str,
    stack_phase: np.ndarray,
    stack_layer: np.ndarray,
    phase_names: Sequence[str],
    steps: Sequence[tuple[int, float, float]] = (),
) -> str:
    """The processed-profile JSON of ``profile``, weights from ``mode``. ``stack_phase[i]`` indexes
    ``phase_names`` (the categories) for interned stack ``i``; ``stack_layer[i]`` is the frame id of its
    innermost layer or -1; ``steps`` are (thread index, start, end) in profile seconds."""
    if profile.num_samples and not np.any(profile.sample_time):
        source = profile.meta.get("source", "this profile")
        raise FlameprofError(
            f"a Firefox Profiler file needs timestamped samples; {source} has none "
            "(collapsed stacks carry no time)"
        )
    strings = _Strings()
    labeler = Labeler(profile.meta)
    frames = profile.frames

    # categories: one per phase; subcategories: "Other" then the layers met in that phase
    subcategories: list[list[str]] = [["Other"] for _ in phase_names]
    sub_index: dict[tuple[int, int], int] = {}
    frame_key: dict[tuple[int, int, int], int] = {}
    fcols: dict[str, list] = {"func": [], "category": [], "subcategory": [], "line": []}
    stack_frame_ids = []
    for fid, phase, layer in zip(profile.stack_frame.tolist(), stack_phase.tolist(), stack_layer.tolist()):
        sub = 0
        if layer >= 0:
            sub = sub_index.get((phase, layer), -1)
            if sub < 0:
                sub = sub_index[(phase, layer)] = len(subcategories[phase])
                subcategories[phase].append(labeler.label(frames[layer]))
        key = (fid, phase, sub)
        index = frame_key.get(key)
        if index is None:
            index = frame_key[key] = len(fcols["func"])
            fcols["func"].append(fid)
            fcols["category"].append(phase)
            fcols["subcategory"].append(sub)
            fcols["line"].append(frames[fid].line or None)
        stack_frame_ids.append(index)
    n_frames = len(fcols["func"])
    frame_table = _table(
        {
            "address": [-1] * n_frames,
            "lib": [-1] * n_frames,
            "inlineDepth": [0] * n_frames,
            **fcols,
            "nativeSymbol": [None] * n_frames,
            "innerWindowID": [0] * n_frames,
            "column": [None] * n_frames,
            "originalLocation": [None] * n_frames,
        }
    )

    # functions: one per flameprof frame; a file is both the function's resource and its source
    files: dict[str, int] = {}
    for f in frames:
        if f.file:
            files.setdefault(f.file, len(files))
    file_names = [strings(labeler.short_path(path)) for path in files]
    func_table = _table(
        {
            "name": [strings(labeler.label(f)) for f in frames],
            "isJS": [False] * len(frames),
            "relevantForJS": [False] * len(frames),
            "resource": [files[f.file] if f.file else -1 for f in frames],
            "source": [files[f.file] if f.file else None for f in frames],
            "lineNumber": [f.line or None for f in frames],
            "columnNumber": [None] * len(frames),
            "originalLocation": [None] * len(frames),
        }
    )
    resource_table = _table({"name": file_names, "host": [None] * len(files), "type": [0] * len(files)})
    sources = _table(
        {
            "id": [None] * len(files),
            "filename": file_names,
            "startLine": [1] * len(files),
            "startColumn": [1] * len(files),
            "sourceMapURL": [None] * len(files),
            "content": [None] * len(files),
        }
    )
    own = np.arange(len(profile.stack_parent))
    stack_table = _table(
        {
            "frame": stack_frame_ids,
            "prefixOffset": np.where(profile.stack_parent >= 0, own - profile.stack_parent, 0).tolist(),
        }
    )

    # samples: wall or CPU milliseconds as "tracing-ms" weights; counts as "samples" weights
    timed = mode != "samples" and profile.meta.get("weight_unit", "seconds") == "seconds"
    weights = profile.weights(mode) * (1e3 if timed else 1.0)
    weight_type = "tracing-ms" if timed else "samples"
    categories = {name: i for i, name in enumerate(phase_names)}
    sample_phase = np.append(stack_phase, categories.get("other", 0))[profile.sample_stack]
    order = np.lexsort((profile.sample_time, profile.sample_thread))
    bounds = np.searchsorted(profile.sample_thread[order], np.arange(len(profile.threads) + 1))
    markers = [_Markers() for _ in profile.threads]
    threads: list[dict] = []
    for index, info in enumerate(profile.threads):
        rows = order[bounds[index] : bounds[index + 1]]
        times, walls = profile.sample_time[rows], profile.sample_wall[rows]
        stacks = profile.sample_stack[rows]
        samples = {
            "stack": [s if s >= 0 else None for s in stacks.tolist()],
            "time": np.round(times * 1e3, 6).tolist(),
            "weight": weights[rows].tolist(),
            "weightType": weight_type,
            "threadCPUDelta": (profile.sample_cpu[rows] * 1e6).tolist(),
            "length": len(rows),
        }
        phases = sample_phase[rows]
        first, last = _runs(phases)
        for a, b, phase in zip(first.tolist(), last.tolist(), phases[first].tolist()):
            start, end = float(times[a] - walls[a]), float(times[b])
            name = phase_names[phase]
            markers[index].add(strings(name), start, end, phase, {"type": "Phase", "phase": name})
            if name in WAIT_PHASES:
                markers[index].add(strings(name), start, end, phase, {"type": "Wait", "phase": name})
        threads.append(_thread(profile, info.pid, info.tid, info.name or f"thread {info.tid}", samples))

    other = categories.get("other", 0)
    for number, (thread, start, end) in enumerate(steps):
        if 0 <= thread < len(markers):
            markers[thread].add(
                strings(f"step {number}"), start, end, other, {"type": "Step", "step": number}
            )
    for mark in profile.marks:
        if 0 <= mark.thread < len(markers):
            data = {"type": "Mark", "value": mark.value}
            markers[mark.thread].add(strings(mark.name), mark.time, None, other, data)

    by_tid = {(t.pid, t.tid): i for i, t in enumerate(profile.threads)}
    if profile.trace is not None:
        _trace_markers(profile, threads, markers, by_tid, strings, categories)
    for thread_json, table in zip(threads, markers):
        thread_json["markers"] = table.table()
    for p in profile.processes:  # a process known but never sampled still gets its track
        if not any(t.pid == p.pid for t in profile.threads):
            threads.append(_thread(profile, p.pid, p.pid, p.role or "process", _empty_samples(weight_type)))
            threads[-1]["markers"] = _Markers().table()
    _choose_main_threads(threads)

    start = profile.meta.get("start_time") or 0.0
    end = max([float(profile.sample_time.max())] if profile.num_samples else [0.0])
    rate = float(profile.meta.get("rate") or 0)
    doc = {
        "meta": {
            "interval": 1e3 / rate if rate > 0 else 1.0,
            "startTime": float(start) * 1e3,
            "endTime": float(start) * 1e3 + end * 1e3,
            "processType": 0,
            "product": profile.meta.get("title") or "flameprof",
            "stackwalk": 0,
            "version": GECKO_PROFILE_VERSION,
            "preprocessedProfileVersion": PROCESSED_PROFILE_VERSION,
            "categories": [
                {"name": name, "color": _COLORS.get(name, "grey"), "subcategories": subs}
                for name, subs in zip(phase_names, subcategories)
            ],
            "markerSchema": _SCHEMAS,
            "sampleUnits": {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"},
            "symbolicated": True,
            "usesOnlyOneStackType": True,
            "keepProfileThreadOrder": True,
            "importedFrom": "flameprof",
            "arguments": _arguments(profile.meta.get("argv")),
        },
        "libs": [],
        "shared": {
            "stackTable": stack_table,
            "frameTable": frame_table,
            "funcTable": func_table,
            "resourceTable": resource_table,
            "nativeSymbols": _table({"libIndex": [], "address": [], "name": [], "functionSize": []}),
            "stringArray": strings.array,
            "sources": sources,
            "sourceLocationTable": _table({"source": [], "line": [], "column": []}),
        },
        "threads": threads,
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _arguments(argv: object) -> str:
    return " ".join(map(str, argv)) if isinstance(argv, list) else str(argv or "")


def _thread(profile: Profile, pid: int | str, tid: int, name: str, samples: dict) -> dict:
    process = process_label(profile, pid) if isinstance(pid, int) else str(pid)
    return {
        "processType": "default",
        "processStartupTime": 0,
        "processShutdownTime": None,
        "registerTime": 0,
        "unregisterTime": None,
        "pausedRanges": [],
        "showMarkersInTimeline": True,
        "name": name,
        "isMainThread": False,
        "processName": process,
        "pid": str(pid),
        "tid": tid,
        "samples": samples,
    }


def _choose_main_threads(threads: list[dict]) -> None:
    """One main thread per process (the one whose tid is the pid, else the first): it carries the
    process's track."""
    by_pid: dict[str, list[dict]] = {}
    for t in threads:
        by_pid.setdefault(t["pid"], []).append(t)
    for pid, group in by_pid.items():
        main = next((t for t in group if str(t["tid"]) == pid), group[0])
        main["isMainThread"] = True


def _trace_markers(
    profile: Profile,
    threads: list[dict],
    markers: list[_Markers],
    by_tid: dict[tuple[int, int], int],
    strings: _Strings,
    categories: dict[str, int],
) -> None:
    """The traced window's events as interval markers: host ops on their thread (a new one when the
    samples never saw it), device kernels and copies on one thread per device stream."""
    trace = profile.trace
    assert trace is not None
    ev = trace.events
    columns = [
        ev[k].tolist()
        for k in (
            "kind",
            "name",
            "start",
            "dur",
            "pid",
            "tid",
            "device",
            "layer",
            "phase",
            "flops",
            "bytes",
            "shapes",
        )
    ]
    extra: dict[tuple[object, int], int] = {}
    other = categories.get("other", 0)
    for kind, name, start, dur, pid, tid, device, layer, phase, flops, size, shapes in zip(*columns):
        if kind in DEVICE_KINDS:
            key: tuple[object, int] = (f"device {device}", tid)
            thread_name = f"stream {tid}"
        else:
            key, thread_name = (pid, tid), f"thread {tid}: traced ops"
        index = by_tid.get(key) if isinstance(key[0], int) else None  # type: ignore[arg-type]
        if index is None:
            index = extra.get(key, -1)
            if index < 0:
                index = extra[key] = len(threads)
                threads.append(_thread(profile, key[0], tid, thread_name, _empty_samples("samples")))  # type: ignore[arg-type]
                markers.append(_Markers())
        phase_name = PHASES[phase]
        data = {
            "type": "TracedEvent",
            "kind": EVENT_KINDS[kind],
            "layer": trace.name_of(layer),
            "phase": phase_name,
            "shapes": trace.name_of(shapes),
            "flops": flops,
            "bytes": size,
        }
        category = categories.get(RULE_PHASES.get(phase_name, ""), other)
        markers[index].add(strings(trace.names[name]), start, start + dur, category, data)
