"""Ops, layers, memory and the device inside a traced window (``Profile.trace``): pure functions.

What a user acts on: which ops take the time (self and total, calls, shapes), what each layer
costs forward and backward with its FLOPs and parameters, where memory peaks and what each layer
keeps for backward, and, with a device, how busy it was in each traced step, where its time went
(kernels per layer and phase, copies) and why it idled (waiting for data, for the host, for syncs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any

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
from .device_breakdown import COMMUNICATION, DeviceTime, device_times, event_types, kernel_stats

TOP_OPS = 15
# Device idle time is input-bound, host-bound or sync-bound when that cause has at least this share.
IDLE_CAUSE_SHARE = 0.2
_COPY_KINDS = {"HtoD": "host_to_device", "DtoH": "device_to_host", "DtoD": "device_to_device"}


@dataclass
class OpTimes:
    """Per-event derived columns: self time (duration less that of child ops) and the root mask."""

    self_time: np.ndarray
    counted: np.ndarray  # host ops whose ancestors hold no op of the same name (for total time)


def op_times(trace: Trace) -> OpTimes:
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
    return OpTimes(self_time, counted)


def window_seconds(trace: Trace) -> float:
    if trace.steps:
        return float(sum(b - a for a, b in trace.steps))
    host = trace.events["kind"] != KERNEL
    if not host.any():
        return 0.0
    start = trace.events["start"][host]
    return float((start + trace.events["dur"][host]).max() - start.min())


def top_ops(trace: Trace, times: OpTimes, top: int = TOP_OPS) -> list[dict[str, Any]]:
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
    rows = []
    for name in sorted(self_by, key=lambda k: -self_by[k])[:top]:
        rows.append(
            {
                "name": trace.names[name],
                "calls": calls[name],
                "self": self_by[name],
                "total": total_by[name],
                "shapes": [trace.names[s] for s, _ in shapes[name].most_common(3)],
            }
        )
    return rows


def layer_table(trace: Trace, times: OpTimes) -> list[dict[str, Any]]:
    """One row per layer path: op time forward and backward, FLOPs, GFLOP/s, parameters, device time."""
    ev = trace.events
    rows: dict[str, dict[str, Any]] = {}

    def row(layer: int) -> dict[str, Any]:
        name = trace.names[layer]
        if name not in rows:
            count, size = trace.params.get(name, (0, 0))
            rows[name] = {
                "name": name,
                "params": count,
                "param_bytes": size,
                "forward": 0.0,
                "backward": 0.0,
                "flops": 0.0,
                "forward_flops": 0.0,
                "device": 0.0,
            }
        return rows[name]

    kind, layer, phase = ev["kind"].tolist(), ev["layer"].tolist(), ev["phase"].tolist()
    backward, forward = PHASES.index("backward"), PHASES.index("forward")
    for i in np.nonzero(ev["layer"] >= 0)[0].tolist():
        r = row(layer[i])
        if kind[i] == OP:
            key = "backward" if phase[i] == backward else "forward" if phase[i] == forward else None
            if key:
                r[key] += float(times.self_time[i])
            r["flops"] += float(ev["flops"][i])
            if phase[i] == forward:
                r["forward_flops"] += float(ev["flops"][i])
        elif kind[i] in DEVICE_KINDS:
            r["device"] += float(ev["dur"][i])
    for name, (count, size) in trace.params.items():
        if name not in rows and count:
            rows[name] = {"name": name, "params": count, "param_bytes": size, "forward": 0.0, "backward": 0.0,
                          "flops": 0.0, "forward_flops": 0.0, "device": 0.0}  # fmt: skip
    for r in rows.values():
        busy = r["device"] or (r["forward"] + r["backward"])
        r["gflops_per_s"] = r["flops"] / busy / 1e9 if busy > 0 and r["flops"] else 0.0
    return sorted(rows.values(), key=lambda r: -(r["forward"] + r["backward"] + r["device"]))


def phase_op_seconds(trace: Trace, times: OpTimes) -> dict[str, float]:
    sums = np.bincount(trace.events["phase"].astype(np.int64), weights=times.self_time, minlength=len(PHASES))
    return {name: float(sums[i]) for i, name in enumerate(PHASES)}


def memory_table(trace: Trace) -> dict[str, Any]:
    """Allocated and held bytes per layer, the peak and where it happened, on the busiest device."""
    mem, ev = trace.memory, trace.events
    if not len(mem["time"]):
        return {}
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
    per_layer: dict[str, dict[str, Any]] = {}
    forward = PHASES.index("forward")
    for r in rows.tolist():
        e = int(mem["event"][r])
        if e < 0 or ev["layer"][e] < 0:
            continue
        name = trace.names[int(ev["layer"][e])]
        entry = per_layer.setdefault(name, {"name": name, "allocated": 0.0, "held": 0.0})
        delta = float(mem["delta"][r])
        if delta > 0:
            entry["allocated"] += delta
        if ev["phase"][e] == forward:
            entry["held"] += delta
    return {
        "device": "cpu" if device < 0 else f"device {device}",
        "peak": float(total.max()),
        "peak_time": float(mem["time"][peak_row]),
        "peak_layer": trace.name_of(int(ev["layer"][event])) if event >= 0 else "",
        "peak_op": trace.name_of(int(ev["name"][op if op >= 0 else event])) if event >= 0 else "",
        "layers": sorted(per_layer.values(), key=lambda r: -r["allocated"]),
    }


def device_table(trace: Trace, profile: Profile | None = None) -> dict[str, Any]:
    """Busy and idle share per traced step, kernel time per layer and phase, copies, syncs, the
    cause of the idle time, and each device's breakdown as HTA makes it (``device_breakdown.py``).
    Empty when the window saw no device activity."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    if not on_device.any():
        return {}
    start, end = ev["start"], ev["start"] + ev["dur"]
    busy = intervals.merged(start[on_device], end[on_device])
    spans = list(trace.steps) or [(float(start.min()), float(end.max()))]
    firsts, lasts = np.array([a for a, _ in spans]), np.array([b for _, b in spans])
    on = intervals.covered_before(busy, lasts) - intervals.covered_before(busy, firsts)
    steps = []
    for a, b, covered in zip(firsts.tolist(), lasts.tolist(), on.tolist()):
        share = covered / (b - a) if b > a else 0.0
        steps.append(
            {"start": a, "wall": b - a, "busy_percent": 100 * share, "idle_percent": 100 * (1 - share)}
        )
    kernel_by_layer: dict[str, float] = defaultdict(float)
    kernel_by_phase: dict[str, float] = defaultdict(float)
    for layer, phase, seconds in zip(
        ev["layer"][on_device].tolist(), ev["phase"][on_device].tolist(), ev["dur"][on_device].tolist()
    ):
        kernel_by_layer[trace.name_of(layer) or "(no layer)"] += seconds
        kernel_by_phase[PHASES[phase]] += seconds
    devices = device_times(trace)
    stats = kernel_stats(trace)
    return {
        "busy_percent": 100 * float(on.sum()) / max(float((lasts - firsts).sum()), 1e-12),
        "steps": steps,
        "device_seconds": float(ev["dur"][on_device].sum()),
        "device_events": int(on_device.sum()),
        "kernels": [asdict(k) for k in stats[:TOP_OPS]],
        "devices": [{**asdict(d), "overlap_percent": d.overlap_percent} for d in devices],
        "kernel_by_layer": dict(sorted(kernel_by_layer.items(), key=lambda kv: -kv[1])),
        "kernel_by_phase": dict(kernel_by_phase),
        "copies": _copies(trace),
        "sync": _syncs(trace, profile),
        "idle": _idle_causes(trace, spans, devices),
    }


def _copies(trace: Trace) -> dict[str, Any]:
    ev = trace.events
    out: dict[str, dict[str, Any]] = {}
    for i in np.nonzero(np.isin(ev["kind"], (MEMCPY, MEMSET)))[0].tolist():
        name = trace.names[int(ev["name"][i])]
        if ev["kind"][i] == MEMSET:
            key = "memset"
        else:
            key = next((v for k, v in _COPY_KINDS.items() if k in name), "other_copy")
        entry = out.setdefault(key, {"count": 0, "bytes": 0.0, "seconds": 0.0})
        entry["count"] += 1
        entry["bytes"] += float(ev["bytes"][i])
        entry["seconds"] += float(ev["dur"][i])
    return out


def _syncs(trace: Trace, profile: Profile | None) -> dict[str, Any]:
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
    return {
        "seconds": float(ev["dur"][sync].sum()),
        "count": len(sync),
        "sites": [
            {"site": k, "count": c, "seconds": s}
            for k, (c, s) in sorted(sites.items(), key=lambda kv: -kv[1][1])
        ],
    }


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


def _idle_causes(trace: Trace, spans: list[tuple[float, float]], devices: list[DeviceTime]) -> dict[str, Any]:
    """What held the device's computation up while it idled or only communicated: communication
    (a collective's kernels, or the host inside a collective), the host waiting for data on the
    loop thread, the host blocked in a sync on any thread, or the host busy itself (the device
    waits for launches); each counted once, in that order; and the resulting verdict."""
    ev = trace.events
    kind = ev["kind"]
    host = (kind == OP) | (kind == ANNOTATION) | (kind == RUNTIME)
    ops = host & (kind == OP)
    if not ops.any():
        return {}
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
    return {
        "seconds": total,
        "percent": 100 * total / wall if wall > 0 else 0.0,
        **{f"{cause}_percent": 100 * share for cause, share in shares.items()},
        **device_verdict(shares, collective, overlap),
    }


def device_verdict(
    shares: dict[str, float], collective: str = "", overlap: float | None = None
) -> dict[str, Any]:
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
        return {"level": "comm", "verdict": text}
    if data >= MODERATELY:
        degree = "highly" if data >= HIGHLY else "moderately"
        text = f"{degree} input-bound: the device idles {100 * data:.1f}% of the step"
        text += " while the host waits for data"
        return {"level": "input", "verdict": text}
    cause = max(("sync", "host"), key=shares.__getitem__)
    if shares[cause] >= IDLE_CAUSE_SHARE:
        what = "blocks in synchronisation" if cause == "sync" else "runs Python and launches work"
        text = f"{cause}-bound: the device idles {100 * shares[cause]:.1f}% of the step while the host {what}"
        return {"level": cause, "verdict": text}
    return {"level": "device", "verdict": "device-bound: the device is busy; speed up its kernels"}


def op_stacks(trace: Trace, mode: str = "wall") -> dict[tuple[Frame, ...], float]:
    """The ``ops`` view: layer path, then the op and the ops it calls, then (with a device) the kernel.
    Weighted by device time when the window saw a device, else by each op's self time; ``samples``
    counts events."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    rows = np.nonzero(on_device)[0] if on_device.any() else np.nonzero(ev["kind"] == OP)[0]
    weights = ev["dur"] if on_device.any() else op_times(trace).self_time
    kinds, parents, names, layers = (
        ev["kind"].tolist(),
        ev["parent"].tolist(),
        ev["name"].tolist(),
        ev["layer"].tolist(),
    )
    out: dict[tuple[Frame, ...], float] = {}
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


def ops_report(profile: Profile) -> dict[str, Any]:
    """The report's ``ops``, ``memory`` and ``device`` sections (empty dicts without a trace)."""
    trace = profile.trace
    if trace is None or not trace.num_events:
        return {"ops": {}, "memory": {}, "device": {}}
    times = op_times(trace)
    return {
        "ops": {
            "window_seconds": window_seconds(trace),
            "steps": len(trace.steps),
            "op_seconds": float(times.self_time.sum()),
            "phases": phase_op_seconds(trace, times),
            "top": top_ops(trace, times),
            "layers": layer_table(trace, times),
        },
        "memory": memory_table(trace),
        "device": device_table(trace, profile),
    }
