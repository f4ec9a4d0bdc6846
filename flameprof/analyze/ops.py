"""Ops, layers, memory and the device inside a traced window (``Profile.trace``): pure functions.

What a user acts on: which ops take the time (self and total, calls, shapes), what each layer
costs forward and backward with its FLOPs and parameters, where memory peaks and what each layer
keeps for backward, and, with a device, how busy it was in each traced step, where its time went
(kernels per layer and phase, copies) and why it idled (waiting for data, for the host, for syncs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model.frames import category
from ..model.phase_names import PHASES
from ..model.profile import Frame, Profile
from ..model.trace import (
    ANNOTATION,
    DEVICE_KINDS,
    KERNEL,
    MEMCPY,
    MEMSET,
    OP,
    RUNTIME,
    Trace,
    nesting_order,
)
from . import intervals
from .advice import HIGHLY, MODERATELY
from .device_breakdown import COMMUNICATION, DeviceTime, KernelStats, device_times, event_types, kernel_stats

TOP_OPS = 15
# Device idle time is input-bound, host-bound or sync-bound when that cause has at least this share.
IDLE_CAUSE_SHARE = 0.2
_COPY_KINDS = {"HtoD": "host_to_device", "DtoH": "device_to_host", "DtoD": "device_to_device"}


@dataclass
class OpTimes:
    """Per-event derived columns: self time (duration less that of child ops) and the root mask."""

    self_time: np.ndarray
    counted: np.ndarray  # host ops whose ancestors hold no op of the same name (for total time)


@dataclass
class OpRow:
    """One op name in the window: calls, self and total seconds, its commonest input shapes."""

    name: str
    calls: int
    self: float
    total: float
    shapes: list[str]


@dataclass
class LayerCost:
    """One layer path in the window: op seconds forward and backward, FLOPs, parameters, device time."""

    name: str
    params: int
    param_bytes: int
    forward: float = 0.0
    backward: float = 0.0
    flops: float = 0.0
    forward_flops: float = 0.0
    device: float = 0.0
    gflops_per_s: float = 0.0


@dataclass
class OpsSection:
    """The traced window's host ops: its length and steps, op time by phase, top ops, layer costs."""

    window_seconds: float
    steps: int
    op_seconds: float
    phases: dict[str, float]
    top: list[OpRow]
    layers: list[LayerCost]


@dataclass
class MemoryLayer:
    name: str
    allocated: float  # bytes allocated in the layer's own ops
    held: float  # bytes its forward (its sub-layers' included) allocated and did not free, at least 0


@dataclass
class MemorySection:
    """The allocator on the busiest device: its peak, where it happened, and bytes per layer."""

    device: str
    peak: float
    peak_time: float
    peak_layer: str
    peak_op: str
    layers: list[MemoryLayer]


@dataclass
class DeviceStep:
    start: float
    wall: float
    busy_percent: float
    idle_percent: float


@dataclass
class CopyStats:
    count: int = 0
    bytes: float = 0.0
    seconds: float = 0.0


@dataclass
class SyncSite:
    site: str  # the Python call site (``fn (file:line)``), or the outermost op around the call
    count: int
    seconds: float


@dataclass
class SyncSection:
    """Host time blocked in synchronising runtime calls, by call site."""

    seconds: float
    count: int
    sites: list[SyncSite]


@dataclass
class IdleCauses:
    """The device's computation idle time in the steps, by what held it up, and the verdict."""

    seconds: float
    percent: float
    comm_percent: float
    data_percent: float
    sync_percent: float
    host_percent: float
    level: str  # comm, input, sync, host or device
    verdict: str


@dataclass
class DeviceSection:
    """The device in the traced window: busy share per step, kernels, per-device breakdowns, copies,
    syncs and the causes of its idle time."""

    busy_percent: float
    steps: list[DeviceStep]
    device_seconds: float
    device_events: int
    kernels: list[KernelStats]
    devices: list[DeviceTime]
    kernel_by_layer: dict[str, float]
    kernel_by_phase: dict[str, float]
    communication_by_layer: dict[str, float]  # collectives' kernel seconds by the launching layer
    idle_by_layer: dict[str, float]  # the steps' device idle seconds by what the host was in then
    idle_by_site: dict[str, float]  # the same by the Python call site the loop thread's samples show
    copies: dict[str, CopyStats]
    sync: SyncSection
    idle: IdleCauses | None


@dataclass
class TracedSections:
    """The report's sections from a traced window; each None without one (or without a device)."""

    ops: OpsSection | None = None
    memory: MemorySection | None = None
    device: DeviceSection | None = None


_LAST_TIMES: list[tuple[Trace, OpTimes]] = []  # the last trace's: the report's sections share them


def op_times(trace: Trace) -> OpTimes:
    """Each op's self time and whether it counts towards its name's total (walks every op's
    ancestors: computed once per trace, for the ops table, the op table, graph advice and one step)."""
    if _LAST_TIMES and _LAST_TIMES[0][0] is trace:
        return _LAST_TIMES[0][1]
    ev = trace.events
    n = trace.num_events
    kind, parent, dur, name = ev["kind"], ev["parent"], ev["dur"], ev["name"]
    is_op = kind == OP
    child_time = np.zeros(n)
    has_parent = (parent >= 0) & is_op
    np.add.at(child_time, parent[has_parent], dur[has_parent])
    self_time = np.where(is_op, np.maximum(dur - child_time, 0.0), 0.0)
    counted = is_op.copy()
    # an op inside another op of its name (a recursion, a wrapper's call of the same op) is in that
    # one's total already: every op climbs its ancestors at once, one level a pass
    walking = np.flatnonzero(is_op)
    above = parent[walking].astype(np.int64)
    while len(walking):
        going = above >= 0
        walking, above = walking[going], above[going]
        same = (kind[above] == OP) & (name[above] == name[walking])
        counted[walking[same]] = False
        walking, above = walking[~same], parent[above[~same]].astype(np.int64)
    _LAST_TIMES[:] = [(trace, OpTimes(self_time, counted))]
    return _LAST_TIMES[0][1]


def window_seconds(trace: Trace) -> float:
    if trace.steps:
        return float(sum(b - a for a, b in trace.steps))
    host = trace.events["kind"] != KERNEL
    if not host.any():
        return 0.0
    start = trace.events["start"][host]
    return float((start + trace.events["dur"][host]).max() - start.min())


def top_ops(trace: Trace, times: OpTimes, top: int = TOP_OPS) -> list[OpRow]:
    ev = trace.events
    ops = np.flatnonzero(ev["kind"] == OP)
    if not len(ops):
        return []
    names, first = np.unique(ev["name"][ops], return_index=True)
    which = np.searchsorted(names, ev["name"][ops])
    self_by = np.bincount(which, weights=times.self_time[ops], minlength=len(names))
    counted = np.where(times.counted[ops], ev["dur"][ops], 0.0)
    total_by = np.bincount(which, weights=counted, minlength=len(names))
    calls = np.bincount(which, minlength=len(names))
    shapes = ev["shapes"][ops]
    # the most self time first, then the first seen of equals (a name's rows follow it)
    chosen = np.lexsort((first, -self_by))[:top]
    return [
        OpRow(
            trace.names[int(names[k])],
            int(calls[k]),
            float(self_by[k]),
            float(total_by[k]),
            [trace.names[s] for s in _commonest(shapes[(which == k) & (shapes >= 0)], 3)],
        )
        for k in chosen.tolist()
    ]


def _commonest(values: np.ndarray, count: int = 1) -> list[int]:
    """The ``count`` values seen most often, the first seen of equals first (as Counter.most_common)."""
    unique, first, seen = np.unique(values, return_index=True, return_counts=True)
    chosen: list[int] = unique[np.lexsort((first, -seen))[:count]].tolist()
    return chosen


def layer_table(trace: Trace, times: OpTimes) -> list[LayerCost]:
    """One row per layer path: op time forward and backward, FLOPs, GFLOP/s, parameters, device time."""
    ev = trace.events
    rows: dict[str, LayerCost] = {}
    on_layer = np.flatnonzero(ev["layer"] >= 0)
    layers, first = np.unique(ev["layer"][on_layer], return_index=True)
    which = np.searchsorted(layers, ev["layer"][on_layer])
    kind, phase = ev["kind"][on_layer], ev["phase"][on_layer]
    op = kind == OP
    self_time, flops = times.self_time[on_layer], ev["flops"][on_layer]

    def sums(mask: np.ndarray, values: np.ndarray) -> list[float]:
        summed = np.bincount(which, weights=np.where(mask, values, 0.0), minlength=len(layers))
        out: list[float] = summed.tolist()
        return out

    forward = op & (phase == PHASES.index("forward"))
    columns = zip(
        sums(op & (phase == PHASES.index("backward")), self_time),
        sums(forward, self_time),
        sums(forward, flops),
        sums(op, flops),
        sums(np.isin(kind, DEVICE_KINDS), ev["dur"][on_layer]),
    )
    by_layer = dict(zip(layers.tolist(), columns))
    for layer in layers[np.argsort(first, kind="stable")].tolist():  # in the order the trace first has them
        name = trace.names[layer]
        if name not in rows:
            rows[name] = LayerCost(name, *trace.params.get(name, (0, 0)))
        r = rows[name]
        backward_s, forward_s, forward_flops, all_flops, device_s = by_layer[layer]
        r.backward += backward_s
        r.forward += forward_s
        r.forward_flops += forward_flops
        r.flops += all_flops
        r.device += device_s
    for name, (count, size) in trace.params.items():
        if name not in rows and count:
            rows[name] = LayerCost(name, count, size)
    for r in rows.values():
        busy = r.device or (r.forward + r.backward)
        r.gflops_per_s = r.flops / busy / 1e9 if busy > 0 and r.flops else 0.0
    return sorted(rows.values(), key=lambda r: -(r.forward + r.backward + r.device))


def phase_op_seconds(trace: Trace, times: OpTimes) -> dict[str, float]:
    sums = np.bincount(trace.events["phase"].astype(np.int64), weights=times.self_time, minlength=len(PHASES))
    return {name: float(sums[i]) for i, name in enumerate(PHASES)}


def memory_table(trace: Trace) -> MemorySection | None:
    """Allocated and held bytes per layer, the peak and where it happened, on the busiest device."""
    mem, ev = trace.memory, trace.events
    if not len(mem["time"]):
        return None
    devices = mem["device"]
    gpu = devices >= 0
    device = int(devices[gpu][0]) if gpu.any() else -1
    rows = np.nonzero(devices == device)[0]
    total = mem["total"][rows]
    peak_row = int(rows[int(np.argmax(total))])
    event = int(mem["event"][peak_row])
    op = event
    while op >= 0 and ev["kind"][op] != OP:  # the op around an allocation made in a runtime call
        op = int(ev["parent"][op])
    events = mem["event"][rows]
    inside = events >= 0
    inside[inside] = ev["layer"][events[inside]] >= 0  # made inside a layer
    mine = rows[inside]
    event_of = mem["event"][mine]
    layers, first = np.unique(ev["layer"][event_of], return_index=True)
    which = np.searchsorted(layers, ev["layer"][event_of])
    delta = mem["delta"][mine]
    allocated = np.bincount(which, weights=np.maximum(delta, 0.0), minlength=len(layers)).tolist()
    in_forward = ev["phase"][event_of] == PHASES.index("forward")
    net = np.bincount(which, weights=np.where(in_forward, delta, 0.0), minlength=len(layers)).tolist()
    per_layer: dict[str, MemoryLayer] = {}
    held: dict[str, float] = defaultdict(float)  # per layer path, its subtree's net forward bytes
    for k in np.argsort(first, kind="stable").tolist():  # in the order the allocator first has them
        name = trace.names[int(layers[k])]
        entry = per_layer.setdefault(name, MemoryLayer(name, 0.0, 0.0))
        entry.allocated += allocated[k]
        path = name.split(" (", 1)[0]
        while path:  # the layer and every layer around it
            held[path] += net[k]
            path = path.rpartition(".")[0]
    for entry in per_layer.values():
        # what its forward (its sub-layers' included) allocated less what it freed: what it keeps
        # for backward; a layer that freed more than it allocated (its inputs) keeps nothing
        entry.held = max(held[entry.name.split(" (", 1)[0]], 0.0)
    return MemorySection(
        "cpu" if device < 0 else f"device {device}",
        float(total.max()),
        float(mem["time"][peak_row]),
        trace.name_of(int(ev["layer"][event])) if event >= 0 else "",
        trace.name_of(int(ev["name"][op if op >= 0 else event])) if event >= 0 else "",
        sorted(per_layer.values(), key=lambda r: -r.allocated),
    )


def device_table(trace: Trace, profile: Profile | None = None) -> DeviceSection | None:
    """Busy and idle share per traced step, kernel time per layer and phase, copies, syncs, the
    cause of the idle time, and each device's breakdown as HTA makes it (``device_breakdown.py``).
    Empty when the window saw no device activity."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    if not on_device.any():
        return None
    start, end = ev["start"], ev["start"] + ev["dur"]
    busy = intervals.merged(start[on_device], end[on_device])
    spans = list(trace.steps) or [(float(start.min()), float(end.max()))]
    firsts, lasts = np.array([a for a, _ in spans]), np.array([b for _, b in spans])
    on = intervals.covered_before(busy, lasts) - intervals.covered_before(busy, firsts)
    steps = []
    for a, b, covered in zip(firsts.tolist(), lasts.tolist(), on.tolist()):
        share = covered / (b - a) if b > a else 0.0
        steps.append(DeviceStep(a, b - a, 100 * share, 100 * (1 - share)))
    layer, seconds = ev["layer"][on_device], ev["dur"][on_device]
    communicating = (event_types(trace) == COMMUNICATION)[on_device]
    kernel_by_layer = sums_by(layer, seconds, lambda k: trace.name_of(k) or "(no layer)")
    kernel_by_phase = sums_by(ev["phase"][on_device], seconds, lambda k: PHASES[k])
    communication_by_layer = sums_by(
        layer[communicating], seconds[communicating], lambda k: trace.name_of(k) or "(no layer)"
    )
    idle_by_layer, idle_by_site = _idle_attribution(trace, profile, _idle_in_steps(trace, busy))
    devices = device_times(trace)
    return DeviceSection(
        busy_percent=100 * float(on.sum()) / max(float((lasts - firsts).sum()), 1e-12),
        steps=steps,
        device_seconds=float(ev["dur"][on_device].sum()),
        device_events=int(on_device.sum()),
        kernels=kernel_stats(trace)[:TOP_OPS],
        devices=devices,
        kernel_by_layer=_by_seconds(kernel_by_layer),
        kernel_by_phase=kernel_by_phase,
        communication_by_layer=_by_seconds(communication_by_layer),
        idle_by_layer=idle_by_layer,
        idle_by_site=idle_by_site,
        copies=_copies(trace),
        sync=_syncs(trace, profile),
        idle=_idle_causes(trace, spans, devices),
    )


def sums_by(keys: np.ndarray, values: np.ndarray, label: Callable[[int], str]) -> dict[str, float]:
    """``values`` summed per ``label(key)``, labels in the order their keys first occur (keys of one
    label are summed in that order too): one pass in numpy over millions of events."""
    if not len(keys):
        return {}
    unique, first, which = np.unique(keys, return_index=True, return_inverse=True)
    sums = np.bincount(which.reshape(-1), weights=values, minlength=len(unique)).tolist()
    out: dict[str, float] = {}
    for k in np.argsort(first, kind="stable").tolist():
        name = label(int(unique[k]))
        out[name] = out.get(name, 0.0) + sums[k]
    return out


def _idle_in_steps(trace: Trace, busy: np.ndarray) -> np.ndarray:
    """The intervals of the traced steps (or the window) in which no device event runs (``busy``: the
    device events' union)."""
    ev = trace.events
    start, end = ev["start"], ev["start"] + ev["dur"]
    spans = list(trace.steps) or [(float(start.min()), float(end.max()))]
    steps = intervals.merged(np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
    idle: np.ndarray = intervals.minus(steps, busy)
    return idle


def _by_seconds(seconds: dict[str, float]) -> dict[str, float]:
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


def _idle_attribution(
    trace: Trace, profile: Profile | None, idle: np.ndarray
) -> tuple[dict[str, float], dict[str, float]]:
    """The device's idle intervals (``intervals`` rows) by what the host was in at each one's middle:
    the innermost op, annotation or runtime call running then (the loop thread's first), named by its
    layer path,
    else by its phase in parentheses (``(data)``, ``(sync)``), else ``(no host op)``; and by the
    Python call site the loop thread's samples show during the interval (when the profile has
    samples of the program's own code)."""
    ev = trace.events
    kind = ev["kind"]
    host = np.nonzero((kind == OP) | (kind == ANNOTATION) | (kind == RUNTIME))[0]
    if not len(idle):
        return {}, {}
    main = _commonest(ev["tid"][host])[0] if len(host) else -1  # the loop thread: the most ops
    starts, ends, mids = idle[:, 0], idle[:, 1], (idle[:, 0] + idle[:, 1]) / 2
    lengths = (ends - starts).tolist()
    tids = ev["tid"][host]
    found = _innermost(ev, host[tids == main], mids)  # the loop thread first
    others = sorted(set(tids.tolist()) - {main})
    if others and (found < 0).any():  # else the other threads': the latest started of their innermost
        best, best_start = np.full(len(mids), -1, dtype=np.int64), np.full(len(mids), -np.inf)
        for tid in others:
            inner = _innermost(ev, host[tids == tid], mids)
            later = (inner >= 0) & (ev["start"][np.maximum(inner, 0)] > best_start)
            best[later], best_start[later] = inner[later], ev["start"][inner[later]]
        found = np.where(found >= 0, found, best)
    # what the host was in: -1 no op, a layer (>= 0), or -2 - phase for an op outside layers
    layer = ev["layer"][np.maximum(found, 0)].astype(np.int64)
    phase = ev["phase"][np.maximum(found, 0)].astype(np.int64)
    code = np.where(found < 0, -1, np.where(layer >= 0, layer, -2 - phase))
    by_layer = sums_by(
        code,
        ends - starts,
        lambda c: "(no host op)" if c == -1 else trace.names[c] if c >= 0 else f"({PHASES[-2 - c]})",
    )
    by_site: dict[str, float] = defaultdict(float)
    sites = _call_sites(profile, np.full(len(idle), main), starts, ends)
    for site, seconds in zip(sites, lengths):
        if site:
            by_site[site] += seconds
    return _by_seconds(by_layer), _by_seconds(by_site)


def _innermost(ev: dict[str, np.ndarray], rows: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per point, the innermost of one thread's host events ``rows`` running then (-1 for none): the
    last to start by then (the longer first at equal starts), or the event around it that still runs
    (host events nest: ``parent`` is the enclosing one). Linear in the events, not their product with
    the points: a trace holds millions of events and thousands of idle intervals."""
    if not len(rows):
        return np.full(len(points), -1, dtype=np.int64)
    order = rows[nesting_order(ev["start"][rows], ev["dur"][rows])]
    at = np.searchsorted(ev["start"][order], points, "right") - 1
    found = np.where(at >= 0, order[np.maximum(at, 0)], -1).astype(np.int64)
    end = ev["start"] + ev["dur"]
    parent = ev["parent"].astype(np.int64)
    for _ in range(256):  # climb to the enclosing event while the found one ended before the point
        ended = (found >= 0) & (end[np.maximum(found, 0)] < points)
        if not ended.any():
            break
        found[ended] = parent[found[ended]]
    return np.where((found >= 0) & (end[np.maximum(found, 0)] >= points), found, -1)


def _copies(trace: Trace) -> dict[str, CopyStats]:
    ev = trace.events
    rows = np.flatnonzero(np.isin(ev["kind"], (MEMCPY, MEMSET)))
    codes = ev["name"][rows].astype(np.int64) * 2 + (ev["kind"][rows] == MEMSET)  # (name, is a memset)
    pairs, first, pair_of_row = np.unique(codes, return_index=True, return_inverse=True)
    keys: dict[str, int] = {}  # in the order the trace first has them
    key_of_pair = np.zeros(len(pairs), dtype=np.int64)
    for k in np.argsort(first, kind="stable").tolist():
        pair = int(pairs[k])
        name = trace.names[pair // 2]
        key = "memset" if pair % 2 else next((v for c, v in _COPY_KINDS.items() if c in name), "other_copy")
        key_of_pair[k] = keys.setdefault(key, len(keys))
    key_of_row = key_of_pair[pair_of_row.reshape(-1)]
    count = np.bincount(key_of_row, minlength=len(keys)).tolist()
    size = np.bincount(key_of_row, weights=ev["bytes"][rows], minlength=len(keys)).tolist()
    seconds = np.bincount(key_of_row, weights=ev["dur"][rows], minlength=len(keys)).tolist()
    return {key: CopyStats(count[k], size[k], seconds[k]) for key, k in keys.items()}


def _syncs(trace: Trace, profile: Profile | None) -> SyncSection:
    """Host time blocked in synchronising runtime calls, by the Python call site that caused it."""
    ev = trace.events
    sync = np.nonzero((ev["kind"] == RUNTIME) & (ev["phase"] == PHASES.index("sync")))[0]
    sites: dict[str, list[float]] = {}
    found = _call_sites(profile, ev["tid"][sync], ev["start"][sync], ev["start"][sync] + ev["dur"][sync])
    for i, site in zip(sync.tolist(), found):
        if not site:  # no samples: the outermost op around the call, what Python called (aten::item)
            p, outer = int(ev["parent"][i]), i
            while p >= 0:
                outer = p if ev["kind"][p] == OP else outer
                p = int(ev["parent"][p])
            site = trace.names[int(ev["name"][outer])]
        entry = sites.setdefault(site, [0, 0.0])
        entry[0] += 1
        entry[1] += float(ev["dur"][i])
    return SyncSection(
        float(ev["dur"][sync].sum()),
        len(sync),
        [SyncSite(k, int(c), s) for k, (c, s) in sorted(sites.items(), key=lambda kv: -kv[1][1])],
    )


def _call_sites(profile: Profile | None, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """For each span of a thread, the innermost program frame the thread's samples during it show
    most often, the earliest seen of equals ("" without such samples): the samples that end at or
    after the span's start and began by its end. A thread's samples are sorted once, in groups of
    like length (``_length_groups``), and every span finds its own in each group by bisection,
    looking past its end only as far as the group's longest sample reaches (with one group, a
    single sample of 0.2 s would make every span read 0.2 s of samples beyond its end). The counting
    is done in numpy over (span, sample) pairs, a bounded number of pairs at a time: a trace holds
    hundreds of thousands of idle intervals and syncs, a profile millions of samples."""
    out = [""] * len(tids)
    if profile is None or not profile.num_samples or not len(tids):
        return out
    by_tid: dict[int, list[int]] = {}
    for index, thread in enumerate(profile.threads):
        by_tid.setdefault(thread.tid, []).append(index)
    names: list[str] = [""]  # site 0: no frame of the program's own
    site_ids: dict[str, int] = {"": 0}
    for tid in np.unique(tids).tolist():
        rows = np.nonzero(np.isin(profile.sample_thread, by_tid.get(tid, [])))[0]
        if not len(rows):
            continue
        stacks, stack_of_row = np.unique(profile.sample_stack[rows], return_inverse=True)
        site_of_stack = np.array(
            [site_ids.setdefault(_program_frame(profile, s), len(site_ids)) for s in stacks.tolist()],
            dtype=np.int64,
        )
        names.extend(list(site_ids)[len(names) :])
        site = site_of_stack[stack_of_row.reshape(-1)]
        rows, site = rows[site > 0], site[site > 0]  # only samples with a site count
        if not len(rows):
            continue
        by_time = np.argsort(profile.sample_time[rows], kind="stable")
        rows, site = rows[by_time], site[by_time]
        wall = profile.sample_wall[rows]
        group = _length_groups(wall)
        rank = np.argsort(group, kind="stable")  # by group, each in time order; its time order is its rank
        times = profile.sample_time[rows][rank]
        samples = _Samples(site[rank], times - wall[rank], rank)
        spans = np.nonzero(tids == tid)[0]
        bounds = np.searchsorted(group[rank], np.arange(int(group.max()) + 2)).tolist()
        ranges = []  # per group, (span, lo, hi): the rows of the group a span reads, where there are any
        for a, b in zip(bounds[:-1], bounds[1:]):
            if a < b:
                reach = float(wall[rank[a:b]].max())
                lo = a + np.searchsorted(times[a:b], starts[spans], "left")
                hi = a + np.searchsorted(times[a:b], ends[spans] + reach, "right")
                some = np.flatnonzero(hi > lo)
                ranges.append((some, lo[some], hi[some]))
        pairs = np.zeros(len(spans), dtype=np.int64)
        for some, lo, hi in ranges:
            pairs[some] += hi - lo
        for chunk in _chunks(pairs, PAIRS_AT_ONCE):
            parts = []  # the chunk's spans' ranges in each group
            for some, lo, hi in ranges:
                r = slice(*np.searchsorted(some, [chunk.start, chunk.stop]).tolist())
                parts.append((some[r] - chunk.start, lo[r], hi[r]))
            span_of, lo, hi = (np.concatenate(column) for column in zip(*parts))
            best = _commonest_sites(samples, span_of, lo, hi, ends[spans[chunk]])
            for k, found in zip(spans[chunk].tolist(), best.tolist()):
                out[k] = names[found]
    return out


# (span, sample) pairs counted at once by ``_call_sites``: memory stays bounded when spans overlap.
PAIRS_AT_ONCE = 1 << 22


@dataclass
class _Samples:
    """One thread's samples as ``_call_sites`` reads them, grouped by length."""

    site: np.ndarray  # its call site
    began: np.ndarray  # when its interval began
    rank: np.ndarray  # its place in time order: the earliest seen of equals wins


def _length_groups(wall: np.ndarray) -> np.ndarray:
    """Each sample's group: its length's power of four (from the shortest's), so a group's longest is
    at most four times its shortest."""
    exponent = np.frexp(np.maximum(wall, max(float(wall[wall > 0].min(initial=1.0)), 1e-12)))[1]
    groups: np.ndarray = ((exponent - exponent.min()) // 2).astype(np.int16)  # sorted by radix
    return groups


def _chunks(sizes: np.ndarray, limit: int) -> list[slice]:
    """Consecutive slices of ``sizes`` whose sums stay within about ``limit`` (twice it at most, or one
    element)."""
    total = np.cumsum(sizes)
    cuts = (np.flatnonzero(np.diff(total // limit)) + 1).tolist() if len(sizes) else []
    edges = [0, *cuts, len(sizes)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:]) if a < b] or [slice(0, 0)]


def _commonest_sites(
    samples: _Samples, span_of: np.ndarray, lo: np.ndarray, hi: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Per span (its rows ``lo:hi`` in each group where ``span_of`` names it; those begun by its end
    count), the site seen most often, the earliest seen of equals; 0 where it has no samples."""
    counts = hi - lo
    span = np.repeat(span_of, counts)
    row = np.arange(len(span)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    site = samples.site[row]
    keep = samples.began[row] <= ends[span]
    span, site, rank = span[keep], site[keep], samples.rank[row[keep]]
    best = np.zeros(len(ends), dtype=np.int64)
    if not len(span):
        return best
    sites, ranks = int(site.max()) + 1, len(samples.rank)
    pair = span * sites + site
    if len(ends) * sites * ranks < 1 << 62:  # one sort of (pair, rank) as one integer
        key = np.sort(pair * ranks + rank)
        pair, rank = np.divmod(key, ranks)
    else:
        order = np.lexsort((rank, pair))
        pair, rank = pair[order], rank[order]
    first = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])  # each pair's earliest rank
    seen = np.diff(np.r_[first, len(pair)])
    pair_span, pair_site, pair_rank = pair[first] // sites, pair[first] % sites, rank[first]
    # per span: the most seen, then the earliest seen
    order = np.lexsort((pair_rank, -seen, pair_span))
    winners = order[np.r_[True, pair_span[order][1:] != pair_span[order][:-1]]]
    best[pair_span[winners]] = pair_site[winners]
    return best


def _program_frame(profile: Profile, stack: int) -> str:
    """The innermost frame of the program's own code in a stack, as ``name (file:line)``."""
    while stack >= 0:
        frame = profile.frames[int(profile.stack_frame[stack])]
        if frame.kind == "python" and category(frame) == "user":
            return f"{frame.name} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"
        stack = int(profile.stack_parent[stack])
    return ""


def _idle_causes(
    trace: Trace, spans: list[tuple[float, float]], devices: list[DeviceTime]
) -> IdleCauses | None:
    """What held the device's computation up while it idled or only communicated: communication
    (a collective's kernels, or the host inside a collective), the host waiting for data on the
    loop thread, the host blocked in a sync on any thread, or the host busy itself (the device
    waits for launches); each counted once, in that order; and the resulting verdict."""
    ev = trace.events
    kind = ev["kind"]
    host = (kind == OP) | (kind == ANNOTATION) | (kind == RUNTIME)
    ops = host & (kind == OP)
    if not ops.any():
        return None
    main = _commonest(ev["tid"][ops])[0]
    start, end = ev["start"], ev["start"] + ev["dur"]
    phase = ev["phase"]

    def union(rows: np.ndarray) -> np.ndarray:
        return intervals.merged(start[rows], end[rows])

    on_device = np.isin(kind, DEVICE_KINDS)
    communicating = on_device & (event_types(trace) == COMMUNICATION)
    working = union(on_device & ~communicating)
    steps = intervals.merged(np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
    idle = intervals.minus(steps, working)
    wall = sum(b - a for a, b in spans)
    total = intervals.length(idle)
    seconds = {}
    left = idle
    for cause, rows in (
        ("comm", communicating | (host & (phase == PHASES.index("comm")))),
        ("data", host & (ev["tid"] == main) & (phase == PHASES.index("data"))),
        ("sync", host & (phase == PHASES.index("sync"))),
    ):
        held = union(rows)
        seconds[cause] = intervals.overlap(left, held)
        left = intervals.minus(left, held)
    seconds["host"] = intervals.length(left)
    shares = {cause: s / wall if wall > 0 else 0.0 for cause, s in seconds.items()}
    communication = sum(d.communication for d in devices)
    exposed = sum(d.exposed_communication for d in devices)
    overlap = 100 * (1 - exposed / communication) if communication > 0 else None
    collective = max(devices, key=lambda d: d.communication).collective if devices else ""
    level, verdict = device_verdict(shares, collective, overlap)
    return IdleCauses(
        total,
        100 * total / wall if wall > 0 else 0.0,
        comm_percent=100 * shares["comm"],
        data_percent=100 * shares["data"],
        sync_percent=100 * shares["sync"],
        host_percent=100 * shares["host"],
        level=level,
        verdict=verdict,
    )


def device_verdict(
    shares: dict[str, float], collective: str = "", overlap: float | None = None
) -> tuple[str, str]:
    """Why the device's computation idles, from the shares of step time it idled while communication
    ran or the host was in a collective (``comm``), the host waited for data, blocked in syncs, or
    was busy itself. Communication that holds up more than data does, and at least 20 % of the step,
    is the verdict; else input-bound keeps the samples' thresholds (20 % highly, 5 % moderately);
    else a sync or host share of 20 % names the bottleneck; else the device is the limit."""
    data, comm = shares["data"], shares.get("comm", 0.0)
    if comm >= IDLE_CAUSE_SHARE and comm > data:
        text = f"communication-bound: the device's computation idles {100 * comm:.1f}% of the step"
        text += f" waiting for {collective}" if collective else " during communication"
        if overlap is not None:
            text += f"; {overlap:.1f}% of communication overlaps computation"
        return "comm", text
    if data >= MODERATELY:
        degree = "highly" if data >= HIGHLY else "moderately"
        text = f"{degree} input-bound: the device idles {100 * data:.1f}% of the step"
        text += " while the host waits for data"
        return "input", text
    cause = max(("sync", "host"), key=shares.__getitem__)
    if shares[cause] >= IDLE_CAUSE_SHARE:
        what = "blocks in synchronisation" if cause == "sync" else "runs Python and launches work"
        text = f"{cause}-bound: the device idles {100 * shares[cause]:.1f}% of the step while the host {what}"
        return cause, text
    return "device", "device-bound: the device is busy; speed up its kernels"


def op_stacks(trace: Trace, mode: str = "wall") -> dict[tuple[Frame, ...], float]:
    """The ``ops`` view: layer path, then the op and the ops it calls, then (with a device) the kernel,
    and the device's idle time as ``(device idle)`` under what the host was in then. Weighted by
    device time when the window saw a device, else by each op's self time; ``samples`` counts
    events."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    rows = np.nonzero(on_device)[0] if on_device.any() else np.nonzero(ev["kind"] == OP)[0]
    out: dict[tuple[Frame, ...], float] = {}
    if on_device.any():  # the device's idle time in the steps, under what the host was in then
        busy = intervals.merged(ev["start"][on_device], ev["start"][on_device] + ev["dur"][on_device])
        by_layer, _ = _idle_attribution(trace, None, _idle_in_steps(trace, busy))
        for label, seconds in by_layer.items():
            kind = "marker" if label.startswith("(") else "layer"
            key: tuple[Frame, ...] = (Frame(label, kind=kind), Frame("(device idle)", kind="marker"))
            out[key] = 1.0 if mode == "samples" else seconds
    weights = ev["dur"] if on_device.any() else op_times(trace).self_time
    kinds, parents, names, layers = (
        ev["kind"].tolist(),
        ev["parent"].tolist(),
        ev["name"].tolist(),
        ev["layer"].tolist(),
    )
    for i in rows.tolist():
        weight = 1.0 if mode == "samples" else float(weights[i])
        if weight <= 0:
            continue
        chain = [Frame(trace.names[names[i]], kind="native")]
        p = parents[i]
        while p >= 0:
            if kinds[p] == OP:
                chain.append(Frame(trace.names[names[p]], kind="native"))
            p = parents[p]
        layer = trace.names[layers[i]] if layers[i] >= 0 else "(no layer)"
        key = (Frame(layer, kind="layer" if layers[i] >= 0 else "marker"), *reversed(chain))
        out[key] = out.get(key, 0.0) + weight
    return out


def ops_report(profile: Profile) -> TracedSections:
    """The report's ``ops``, ``memory`` and ``device`` sections (None without a trace)."""
    trace = profile.trace
    if trace is None or not trace.num_events:
        return TracedSections()
    times = op_times(trace)
    ops = OpsSection(
        window_seconds(trace),
        len(trace.steps),
        float(times.self_time.sum()),
        phase_op_seconds(trace, times),
        top_ops(trace, times),
        layer_table(trace, times),
    )
    return TracedSections(ops, memory_table(trace), device_table(trace, profile))
