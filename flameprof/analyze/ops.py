"""Ops, layers, memory and the device inside a traced window (``Profile.trace``): pure functions.

What a user acts on: which ops take the time (self and total, calls, shapes), what each layer
costs forward and backward with its FLOPs and parameters, where memory peaks and what each layer
keeps for backward, and, with a device, how busy it was in each traced step, where its time went
(kernels per layer and phase, copies) and why it idled (waiting for data, for the host, for syncs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
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
    parents, names, kinds = parent.tolist(), name.tolist(), kind.tolist()
    for i in np.nonzero(is_op)[0].tolist():
        p = parents[i]
        while p >= 0:
            if kinds[p] == OP and names[p] == names[i]:
                counted[i] = False
                break
            p = parents[p]
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
    self_by: dict[int, float] = defaultdict(float)
    total_by: dict[int, float] = defaultdict(float)
    calls: Counter[int] = Counter()
    shapes: dict[int, Counter[int]] = defaultdict(Counter)
    for i in np.nonzero(ev["kind"] == OP)[0].tolist():
        name = int(ev["name"][i])
        self_by[name] += float(times.self_time[i])
        calls[name] += 1
        if times.counted[i]:
            total_by[name] += float(ev["dur"][i])
        if ev["shapes"][i] >= 0:
            shapes[name][int(ev["shapes"][i])] += 1
    return [
        OpRow(
            trace.names[name],
            calls[name],
            self_by[name],
            total_by[name],
            [trace.names[s] for s, _ in shapes[name].most_common(3)],
        )
        for name in sorted(self_by, key=lambda k: -self_by[k])[:top]
    ]


def layer_table(trace: Trace, times: OpTimes) -> list[LayerCost]:
    """One row per layer path: op time forward and backward, FLOPs, GFLOP/s, parameters, device time."""
    ev = trace.events
    rows: dict[str, LayerCost] = {}

    def row(layer: int) -> LayerCost:
        name = trace.names[layer]
        if name not in rows:
            rows[name] = LayerCost(name, *trace.params.get(name, (0, 0)))
        return rows[name]

    kind, layer, phase = ev["kind"].tolist(), ev["layer"].tolist(), ev["phase"].tolist()
    backward, forward = PHASES.index("backward"), PHASES.index("forward")
    for i in np.nonzero(ev["layer"] >= 0)[0].tolist():
        r = row(layer[i])
        if kind[i] == OP:
            if phase[i] == backward:
                r.backward += float(times.self_time[i])
            elif phase[i] == forward:
                r.forward += float(times.self_time[i])
                r.forward_flops += float(ev["flops"][i])
            r.flops += float(ev["flops"][i])
        elif kind[i] in DEVICE_KINDS:
            r.device += float(ev["dur"][i])
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
    per_layer: dict[str, MemoryLayer] = {}
    forward = PHASES.index("forward")
    held: dict[str, float] = defaultdict(float)  # per layer path, its subtree's net forward bytes
    for r in rows.tolist():
        e = int(mem["event"][r])
        if e < 0 or ev["layer"][e] < 0:
            continue
        name = trace.names[int(ev["layer"][e])]
        entry = per_layer.setdefault(name, MemoryLayer(name, 0.0, 0.0))
        delta = float(mem["delta"][r])
        if delta > 0:
            entry.allocated += delta
        if ev["phase"][e] == forward:
            path = name.split(" (", 1)[0]
            while path:  # the layer and every layer around it
                held[path] += delta
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
    kernel_by_layer: dict[str, float] = defaultdict(float)
    kernel_by_phase: dict[str, float] = defaultdict(float)
    communication_by_layer: dict[str, float] = defaultdict(float)
    communicating = (event_types(trace) == COMMUNICATION)[on_device].tolist()
    for layer, phase, seconds, comm in zip(
        ev["layer"][on_device].tolist(),
        ev["phase"][on_device].tolist(),
        ev["dur"][on_device].tolist(),
        communicating,
    ):
        kernel_by_layer[trace.name_of(layer) or "(no layer)"] += seconds
        kernel_by_phase[PHASES[phase]] += seconds
        if comm:
            communication_by_layer[trace.name_of(layer) or "(no layer)"] += seconds
    idle_by_layer, idle_by_site = _idle_attribution(trace, profile, _idle_in_steps(trace))
    devices = device_times(trace)
    return DeviceSection(
        busy_percent=100 * float(on.sum()) / max(float((lasts - firsts).sum()), 1e-12),
        steps=steps,
        device_seconds=float(ev["dur"][on_device].sum()),
        device_events=int(on_device.sum()),
        kernels=kernel_stats(trace)[:TOP_OPS],
        devices=devices,
        kernel_by_layer=dict(sorted(kernel_by_layer.items(), key=lambda kv: -kv[1])),
        kernel_by_phase=dict(kernel_by_phase),
        communication_by_layer=_by_seconds(communication_by_layer),
        idle_by_layer=idle_by_layer,
        idle_by_site=idle_by_site,
        copies=_copies(trace),
        sync=_syncs(trace, profile),
        idle=_idle_causes(trace, spans, devices),
    )


def _idle_in_steps(trace: Trace) -> np.ndarray:
    """The intervals of the traced steps (or the window) in which no device event runs."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    start, end = ev["start"], ev["start"] + ev["dur"]
    spans = list(trace.steps) or [(float(start.min()), float(end.max()))]
    steps = intervals.merged(np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
    idle: np.ndarray = intervals.minus(steps, intervals.merged(start[on_device], end[on_device]))
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
    main = Counter(ev["tid"][host].tolist()).most_common(1)[0][0] if len(host) else -1
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
    labels = [
        "(no host op)"
        if k < 0
        else trace.names[int(ev["layer"][k])]
        if ev["layer"][k] >= 0
        else f"({PHASES[int(ev['phase'][k])]})"
        for k in found.tolist()
    ]
    by_layer: dict[str, float] = defaultdict(float)
    for label, seconds in zip(labels, lengths):
        by_layer[label] += seconds
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
    order = rows[np.lexsort((-ev["dur"][rows], ev["start"][rows]))]
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
    out: dict[str, CopyStats] = {}
    for i in np.nonzero(np.isin(ev["kind"], (MEMCPY, MEMSET)))[0].tolist():
        name = trace.names[int(ev["name"][i])]
        if ev["kind"][i] == MEMSET:
            key = "memset"
        else:
            key = next((v for k, v in _COPY_KINDS.items() if k in name), "other_copy")
        entry = out.setdefault(key, CopyStats())
        entry.count += 1
        entry.bytes += float(ev["bytes"][i])
        entry.seconds += float(ev["dur"][i])
    return out


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
    most often ("" without such samples). A thread's samples are sorted once and each span finds
    its own by bisection: a trace holds thousands of syncs, a profile millions of samples."""
    out = [""] * len(tids)
    if profile is None or not profile.num_samples or not len(tids):
        return out
    by_tid: dict[int, list[int]] = {}
    for index, thread in enumerate(profile.threads):
        by_tid.setdefault(thread.tid, []).append(index)
    sites_of: dict[int, str] = {}
    longest = float(profile.sample_wall.max())
    for tid in np.unique(tids).tolist():
        rows = np.nonzero(np.isin(profile.sample_thread, by_tid.get(tid, [])))[0]
        if not len(rows):
            continue
        rows = rows[np.argsort(profile.sample_time[rows], kind="stable")]
        times = profile.sample_time[rows]
        for k in np.nonzero(tids == tid)[0].tolist():
            # samples ending at or after the start whose interval began by the end
            lo = int(np.searchsorted(times, starts[k], "left"))
            hi = int(np.searchsorted(times, ends[k] + longest, "right"))
            inside = rows[lo:hi][(times[lo:hi] - profile.sample_wall[rows[lo:hi]]) <= ends[k]]
            counts: Counter[str] = Counter()
            for stack in profile.sample_stack[inside].tolist():
                site = sites_of.get(stack)
                if site is None:
                    site = sites_of[stack] = _program_frame(profile, stack)
                if site:
                    counts[site] += 1
            out[k] = counts.most_common(1)[0][0] if counts else ""
    return out


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
    main = Counter(ev["tid"][ops].tolist()).most_common(1)[0][0]
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
        by_layer, _ = _idle_attribution(trace, None, _idle_in_steps(trace))
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
