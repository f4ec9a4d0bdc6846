"""The device's time in a traced window as Holistic Trace Analysis (HTA) reads a GPU trace, per
device: the temporal breakdown (idle, computation, the rest), time by kernel type (communication,
computation, memory, and where they overlap), how much communication overlaps computation, each
stream's idle time by cause, and per-kernel statistics.

The definitions are HTA's, so the figures can be put side by side (``scripts/compare_hta.py``; the
differences and their reasons are in docs/traced-window.md):

* a kernel's type comes from its name: ``nccl...Kernel`` is communication; ``Memcpy...``,
  ``Memset...`` and ``dma...`` memory; anything else not named for a copy, a fill or a sync is
  computation;
* a device's span runs from its first device event to the end of its last; what no event covers
  is idle, what computation kernels cover is computation, the rest is non-computation;
* a gap between two events on one stream is the host's doing (``host_wait``) when the runtime
  call that launched the second began after the first had ended, the launch of back-to-back work
  (``kernel_wait``) when shorter than ``BACK_TO_BACK``, else ``other`` (waiting on another stream,
  an event, the host's sync).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..model.trace import DEVICE_KINDS, RUNTIME, Trace
from . import intervals

KERNEL_TYPES = ("computation", "communication", "memory", "other")
COMPUTATION, COMMUNICATION, MEMORY, OTHER = range(len(KERNEL_TYPES))
# the types whose overlaps the kernel-type breakdown shows, each with its bit
_OVERLAPPING = (COMPUTATION, COMMUNICATION, MEMORY)
_COMMUNICATION = re.compile(r"nccl.*Kernel")  # NCCL's and RCCL's collectives
_MEMORY = re.compile(r"Memcpy|Memset|dma")
_NOT_COMPUTATION = re.compile(r"nccl.*Kernel|.*Memcpy|Memset|.*Sync")
# HTA's consecutive_kernel_delay (30 us): a shorter gap between two events of a stream is the
# launch of the second
BACK_TO_BACK = 30e-6
IDLE_CAUSES = ("host_wait", "kernel_wait", "other")
_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def kernel_type(name: str) -> int:
    """One of ``COMPUTATION``, ``COMMUNICATION``, ``MEMORY``, ``OTHER`` for a device event's name."""
    if _COMMUNICATION.match(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if not _NOT_COMPUTATION.match(name):
        return COMPUTATION
    return OTHER


def collective_name(name: str) -> str:
    """``AllReduce`` for ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)``; else the name itself."""
    found = _COLLECTIVE.match(name)
    return found.group(1) if found else name


def event_types(trace: Trace) -> np.ndarray:
    """The kernel type of every event (``OTHER`` on the host), classified once per distinct name."""
    by_name = np.array([kernel_type(n) for n in trace.names] + [OTHER], dtype=np.int8)
    ev = trace.events
    return np.where(np.isin(ev["kind"], DEVICE_KINDS), by_name[ev["name"]], OTHER).astype(np.int8)


def launch_times(trace: Trace) -> np.ndarray:
    """When the runtime call that launched each event began; NaN where the trace does not say."""
    ev = trace.events
    parent = ev["parent"]
    known = (parent >= 0) & (ev["kind"][np.maximum(parent, 0)] == RUNTIME)
    return np.where(known, ev["start"][np.maximum(parent, 0)], np.nan)


@dataclass
class StreamTime:
    """One stream of a device: its busy time and events, and its idle time by cause (seconds)."""

    stream: int
    events: int
    busy: float
    host_wait: float
    kernel_wait: float
    other: float

    @property
    def idle(self) -> float:
        return self.host_wait + self.kernel_wait + self.other


@dataclass
class DeviceTime:
    """One device of one process over its span (seconds): HTA's temporal breakdown, time by kernel
    type and their overlaps, and communication's overlap with computation."""

    pid: int
    device: int
    span: float
    idle: float
    computation: float
    non_computation: float
    by_type: dict[str, float]  # "computation", "communication overlapping computation", ...
    communication: float  # seconds some communication kernel runs
    exposed_communication: float  # of which no computation kernel runs
    collective: str  # the collective with the most time (``AllReduce``), or ""
    streams: list[StreamTime]
    # of the communication time, the share some computation kernel runs too (None without any)
    overlap_percent: float | None = field(init=False)

    def __post_init__(self) -> None:
        comm = self.communication
        self.overlap_percent = 100 * (1 - self.exposed_communication / comm) if comm > 0 else None

    def percent(self, seconds: float) -> float:
        return 100 * seconds / self.span if self.span > 0 else 0.0


@dataclass
class KernelStats:
    """Every run of one kernel (or copy, or fill): how many, how long in all and each (seconds)."""

    name: str
    type: str
    count: int
    seconds: float
    min: float
    max: float
    mean: float
    std: float  # the sample standard deviation, 0 for one run


def last_step_start(trace: Trace) -> float | None:
    """Where the breakdown stops: at the last traced step's start when there are several (its work
    may still run on the device when the trace ends, so HTA leaves it out too), else None."""
    return max(a for a, _ in trace.steps) if len(trace.steps) > 1 else None


def device_times(trace: Trace, launched_only: bool = False) -> list[DeviceTime]:
    """The breakdown of every (process, device) pair that ran something, busiest first; over the
    work launched before ``last_step_start`` (an event no runtime call launched counts by its start,
    or not at all with ``launched_only``, as HTA reads a trace)."""
    ev = trace.events
    types = event_types(trace)
    launched = launch_times(trace)
    until = last_step_start(trace)
    device = np.isin(ev["kind"], DEVICE_KINDS)
    if until is not None:
        device &= np.where(np.isnan(launched), ev["start"], launched) < until
    if launched_only:
        device &= ~np.isnan(launched)
    rows = np.nonzero(device)[0]
    if not len(rows):
        return []
    pids = ev["pid"][rows]
    out = []
    for pid in np.unique(pids).tolist():  # processes and devices are few: a pass each
        of_pid = rows[pids == pid]
        for device in np.unique(ev["device"][of_pid]).tolist():
            mine = of_pid[ev["device"][of_pid] == device]
            out.append(_device_time(trace, mine, types, launched, int(pid), int(device)))
    return sorted(out, key=lambda d: -(d.span - d.idle))


def _device_time(
    trace: Trace, rows: np.ndarray, types: np.ndarray, launched: np.ndarray, pid: int, device: int
) -> DeviceTime:
    ev = trace.events
    start, end = ev["start"][rows], ev["start"][rows] + ev["dur"][rows]
    kind = types[rows]
    busy = intervals.merged(start, end)
    span = float(end.max() - start.min())
    idle = span - intervals.length(busy)
    by_kind = [intervals.merged(start[kind == k], end[kind == k]) for k in range(len(KERNEL_TYPES))]
    computation = intervals.length(by_kind[COMPUTATION])
    communication = intervals.length(by_kind[COMMUNICATION])
    exposed = intervals.length(intervals.minus(by_kind[COMMUNICATION], by_kind[COMPUTATION]))
    collective = ""
    if communication > 0:
        comm = rows[kind == COMMUNICATION]
        seconds: dict[str, float] = {}
        for name, dur in zip(ev["name"][comm].tolist(), ev["dur"][comm].tolist()):
            label = collective_name(trace.names[name])
            seconds[label] = seconds.get(label, 0.0) + dur
        collective = max(seconds, key=seconds.__getitem__)
    stream, launch = ev["tid"][rows], launched[rows]
    streams = [
        _stream_time(start[stream == s], end[stream == s], launch[stream == s], s)
        for s in np.unique(stream).tolist()
    ]
    return DeviceTime(
        pid=pid,
        device=device,
        span=span,
        idle=max(idle, 0.0),
        computation=computation,
        non_computation=max(span - computation - idle, 0.0),
        by_type=_by_type([by_kind[k] for k in _OVERLAPPING]),
        communication=communication,
        exposed_communication=exposed,
        collective=collective,
        streams=sorted(streams, key=lambda s: -s.busy),
    )


def _by_type(sets: list[np.ndarray]) -> dict[str, float]:
    """Seconds in each combination of the running types: a sweep over their unions' edges."""
    times = np.concatenate([s.ravel() for s in sets])
    if not len(times):
        return {}
    bits = np.concatenate([np.tile([1 << i, -(1 << i)], len(s)) for i, s in enumerate(sets)]).astype(np.int64)
    order = np.lexsort((bits, times))
    t, running = times[order], np.cumsum(bits[order])
    spans = np.diff(t)
    out: dict[str, float] = {}
    for combination in np.unique(running[:-1]).tolist():
        seconds = float(spans[running[:-1] == combination].sum())
        if combination <= 0 or seconds <= 0:
            continue
        names = [KERNEL_TYPES[k] for i, k in enumerate(_OVERLAPPING) if combination & (1 << i)]
        label = " overlapping ".join(names)
        out[label] = seconds
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _stream_time(start: np.ndarray, end: np.ndarray, launched: np.ndarray, stream: int) -> StreamTime:
    order = np.argsort(start, kind="stable")
    start, end, launched = start[order], end[order], launched[order]
    gap = np.maximum(start[1:] - end[:-1], 0.0)
    host = launched[1:] > end[:-1]  # NaN (launch unknown) compares False, as in HTA
    back_to_back = ~host & (gap < BACK_TO_BACK)
    return StreamTime(
        stream=int(stream),
        events=len(start),
        busy=float((end - start).sum()),
        host_wait=float(gap[host].sum()),
        kernel_wait=float(gap[back_to_back].sum()),
        other=float(gap[~host & ~back_to_back].sum()),
    )


def kernel_stats(trace: Trace) -> list[KernelStats]:
    """Per device event name (every process and device together), the most time first."""
    ev = trace.events
    rows = np.nonzero(np.isin(ev["kind"], DEVICE_KINDS))[0]
    if not len(rows):
        return []
    names, dur = ev["name"][rows], ev["dur"][rows]
    order = np.argsort(names, kind="stable")
    names, dur = names[order], dur[order]
    heads = np.nonzero(np.concatenate([[True], names[1:] != names[:-1]]))[0]
    counts = np.diff(np.append(heads, len(names)))
    sums = np.add.reduceat(dur, heads)
    means = sums / counts
    deviations = np.add.reduceat((dur - np.repeat(means, counts)) ** 2, heads)
    variance = np.where(counts > 1, deviations / np.maximum(counts - 1, 1), 0.0)
    out = [
        KernelStats(
            name=trace.names[int(names[h])],
            type=KERNEL_TYPES[kernel_type(trace.names[int(names[h])])],
            count=int(c),
            seconds=float(s),
            min=float(lo),
            max=float(hi),
            mean=float(m),
            std=float(np.sqrt(max(v, 0.0))),
        )
        for h, c, s, lo, hi, m, v in zip(
            heads,
            counts,
            sums,
            np.minimum.reduceat(dur, heads),
            np.maximum.reduceat(dur, heads),
            means,
            variance,
        )
    ]
    return sorted(out, key=lambda k: -k.seconds)
