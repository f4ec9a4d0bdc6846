"""A traced window: the ops, device activities and memory events torch.profiler (Kineto) recorded
for a few steps, each already attributed to a layer path and a phase, kept as compact columns.

Collectors (the in-process window and the Kineto importer) fill it; analyses read it next to the
samples of the same profile. Times are seconds relative to the profile's ``meta['start_time']``,
like ``sample_time``. Names (ops, kernels, layer paths, input shapes and dtypes) are interned in ``names``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .phase_names import PHASES

# What an event is: a host op (``cpu_op``), a user/framework annotation (record_function), a device
# kernel, a device copy or fill, or a host call into the device runtime (a launch, a synchronize).
EVENT_KINDS = ("op", "annotation", "kernel", "memcpy", "memset", "runtime")
OP, ANNOTATION, KERNEL, MEMCPY, MEMSET, RUNTIME = range(len(EVENT_KINDS))
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)
NO_PARENT = -1

EVENT_COLUMNS: dict[str, type[np.integer[Any]] | type[np.float64]] = {
    "kind": np.int8,
    "name": np.int32,  # index into names
    "start": np.float64,
    "dur": np.float64,
    "pid": np.int32,  # (Linux's pids and tids are below 2**22; a wider value wraps)
    "tid": np.int32,  # host thread id, or the stream for device events
    "device": np.int32,  # -1 for the host
    "parent": np.int32,  # enclosing host event; for a device event, the runtime call that launched it
    "layer": np.int32,  # index into names of the layer path, or -1
    "phase": np.int8,  # index into phase_names.PHASES (``data``: work producing a batch here)
    "flops": np.float64,
    "bytes": np.float64,  # copy/fill size of a device event
    "shapes": np.int32,  # index into names of the input shapes text, or -1
    "types": np.int32,  # index into names of the input dtypes text (``["float","long"]``), or -1
}
MEMORY_COLUMNS: dict[str, type[np.integer[Any]] | type[np.float64]] = {
    "time": np.float64,
    "delta": np.float64,  # bytes allocated (> 0) or freed (< 0)
    "total": np.float64,  # bytes allocated on the device after the event
    "device": np.int32,  # -1 for the host
    "event": np.int32,  # the host event it happened in, or -1
}


def _empty(columns: Mapping[str, type[np.integer[Any]] | type[np.float64]]) -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}


@dataclass
class Trace:
    """The traced window(s) of a profile: events, memory events, the steps traced, layer parameters, the
    devices."""

    names: list[str] = field(default_factory=list)
    events: dict[str, np.ndarray] = field(default_factory=lambda: _empty(EVENT_COLUMNS))
    memory: dict[str, np.ndarray] = field(default_factory=lambda: _empty(MEMORY_COLUMNS))
    steps: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each traced step
    params: dict[str, tuple[int, int]] = field(default_factory=dict)  # layer path -> (count, bytes)
    # device id -> (name, compute capability major, minor), from the trace's ``deviceProperties``
    devices: dict[int, tuple[str, int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.events = {n: np.asarray(self.events[n], dtype=d) for n, d in EVENT_COLUMNS.items()}
        self.memory = {n: np.asarray(self.memory[n], dtype=d) for n, d in MEMORY_COLUMNS.items()}

    @property
    def num_events(self) -> int:
        return len(self.events["kind"])

    def name_of(self, index: int) -> str:
        return self.names[index] if index >= 0 else ""

    def validate(self) -> None:
        """Raise ValueError when columns differ in length or indexes point outside their tables."""
        for table, columns in ((self.events, EVENT_COLUMNS), (self.memory, MEMORY_COLUMNS)):
            lengths = {len(table[name]) for name in columns}
            if len(lengths) > 1:
                raise ValueError("trace columns differ in length")
        ev, n = self.events, self.num_events
        if n:
            if ev["kind"].min() < 0 or ev["kind"].max() >= len(EVENT_KINDS):
                raise ValueError("trace event kind out of range")
            if ev["phase"].min() < 0 or ev["phase"].max() >= len(PHASES):
                raise ValueError("trace event phase out of range")
            if ev["name"].min() < 0 or ev["name"].max() >= len(self.names):
                raise ValueError("trace event name out of range")
            for name in ("layer", "shapes", "types"):
                if ev[name].min() < -1 or ev[name].max() >= len(self.names):
                    raise ValueError(f"trace event {name} out of range")
            if ev["parent"].min() < -1 or ev["parent"].max() >= n:
                raise ValueError("trace event parent out of range")
            if not (np.isfinite(ev["start"]).all() and np.isfinite(ev["dur"]).all()) or ev["dur"].min() < 0:
                raise ValueError("trace event times must be finite, durations non-negative")
        if len(self.memory["event"]) and (self.memory["event"].min() < -1 or self.memory["event"].max() >= n):
            raise ValueError("trace memory event out of range")


def nesting_order(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The indexes of events by start, the longer first at equal starts (so a parent comes before its
    children), reading order among equals: ``np.lexsort((-dur, start))``. A trace is nearly in time
    order already, so a stable sort by start is fast (a merge of runs), and only runs of equal starts
    are then sorted by length (a lexsort of millions of events takes ten times as long)."""
    order = np.argsort(start, kind="stable")
    in_order = start[order]
    tied = np.flatnonzero(in_order[1:] == in_order[:-1])
    if len(tied):
        runs = np.union1d(tied, tied + 1)  # positions in runs of equal starts, runs apart and in order
        order[runs] = order[runs[np.lexsort((-dur[order[runs]], in_order[runs]))]]
    return order


def shifted(trace: Trace, seconds: float) -> Trace:
    """``trace`` with every time moved by ``seconds`` (onto another profile's epoch)."""
    events = dict(trace.events, start=trace.events["start"] + seconds)
    memory = dict(trace.memory, time=trace.memory["time"] + seconds)
    steps = [(a + seconds, b + seconds) for a, b in trace.steps]
    return Trace(list(trace.names), events, memory, steps, dict(trace.params), dict(trace.devices))


def concat(traces_or_none: Sequence[Trace | None]) -> Trace | None:
    """One trace holding the events of ``traces`` (several processes' windows), names re-interned."""
    traces = [t for t in traces_or_none if t is not None]
    if not traces:
        return None
    if len(traces) == 1:
        return traces[0]
    names: dict[str, int] = {}
    events: dict[str, list[np.ndarray]] = {n: [] for n in EVENT_COLUMNS}
    memory: dict[str, list[np.ndarray]] = {n: [] for n in MEMORY_COLUMNS}
    out = Trace()
    offset = 0
    for trace in traces:
        remap = np.array([names.setdefault(n, len(names)) for n in trace.names] + [-1], dtype=np.int32)
        for col in EVENT_COLUMNS:
            values = trace.events[col]
            if col in ("name", "layer", "shapes", "types"):
                values = remap[values]  # -1 indexes the trailing -1
            elif col == "parent":
                values = np.where(values >= 0, values + offset, values)
            events[col].append(values)
        for col in MEMORY_COLUMNS:
            values = trace.memory[col]
            memory[col].append(np.where(values >= 0, values + offset, values) if col == "event" else values)
        offset += trace.num_events
        out.steps.extend(trace.steps)
        out.params.update(trace.params)
        out.devices.update(trace.devices)
    out.names = list(names)
    # no second copy of columns of millions where the parts have their type already
    out.events = {c: np.concatenate(v).astype(EVENT_COLUMNS[c], copy=False) for c, v in events.items()}
    out.memory = {c: np.concatenate(v).astype(MEMORY_COLUMNS[c], copy=False) for c, v in memory.items()}
    return out
