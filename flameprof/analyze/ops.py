"""Ops, layers, memory and the device inside a traced window (``Profile.trace``): pure functions.

What a user acts on: which ops take the time (self and total, calls, shapes), what each layer
costs forward and backward with its FLOPs and parameters, where memory peaks and what each layer
keeps for backward, and, with a device, how busy it was in each traced step, where its time went
(kernels per layer and phase, copies) and why it idled (waiting for data, for the host, for syncs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
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
from .advice import HIGHLY, MODERATELY

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


def merged_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Disjoint sorted ``[[start, end], ...]`` covering the union of the intervals."""
    if not len(starts):
        return np.zeros((0, 2))
    order = np.argsort(starts, kind="stable")
    out: list[list[float]] = []
    for s, e in zip(starts[order].tolist(), ends[order].tolist()):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return np.asarray(out)


def covered(intervals: np.ndarray, start: float, end: float) -> float:
    """Seconds of ``[start, end)`` that the disjoint ``intervals`` cover."""
    if not len(intervals) or end <= start:
        return 0.0
    clipped = np.clip(intervals, start, end)
    return float((clipped[:, 1] - clipped[:, 0]).sum())


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    return sum(covered(b, s, e) for s, e in a.tolist())


def _gaps(intervals: np.ndarray, start: float, end: float) -> np.ndarray:
    """The parts of ``[start, end)`` the disjoint sorted ``intervals`` leave uncovered."""
    out, at = [], start
    for s, e in np.clip(intervals, start, end).tolist():
        if s > at:
            out.append([at, s])
        at = max(at, e)
    if at < end:
        out.append([at, end])
    return np.asarray(out) if out else np.zeros((0, 2))


def device_table(trace: Trace, profile: Profile | None = None) -> dict[str, Any]:
    """Busy and idle share per traced step, kernel time per layer and phase, copies, syncs, and the
    cause of the idle time. Empty when the window saw no device activity."""
    ev = trace.events
    on_device = np.isin(ev["kind"], DEVICE_KINDS)
    if not on_device.any():
        return {}
    start, end = ev["start"], ev["start"] + ev["dur"]
    busy = merged_intervals(start[on_device], end[on_device])
    spans = list(trace.steps) or [(float(start.min()), float(end.max()))]
    steps = []
    for a, b in spans:
        share = covered(busy, a, b) / (b - a) if b > a else 0.0
        steps.append(
            {"start": a, "wall": b - a, "busy_percent": 100 * share, "idle_percent": 100 * (1 - share)}
        )
    kernel_by_layer: dict[str, float] = defaultdict(float)
    kernel_by_phase: dict[str, float] = defaultdict(float)
    kernels: dict[str, list[float]] = {}
    for i in np.nonzero(on_device)[0].tolist():
        seconds = float(ev["dur"][i])
        kernel_by_layer[trace.name_of(int(ev["layer"][i])) or "(no layer)"] += seconds
        kernel_by_phase[PHASES[int(ev["phase"][i])]] += seconds
        if ev["kind"][i] == KERNEL:
            entry = kernels.setdefault(trace.names[int(ev["name"][i])], [0, 0.0])
            entry[0] += 1
            entry[1] += seconds
    return {
        "busy_percent": 100
        * sum(covered(busy, a, b) for a, b in spans)
        / max(sum(b - a for a, b in spans), 1e-12),
        "steps": steps,
        "kernels": [
            {"name": k, "calls": c, "seconds": s}
            for k, (c, s) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
        ],
        "kernel_by_layer": dict(sorted(kernel_by_layer.items(), key=lambda kv: -kv[1])),
        "kernel_by_phase": dict(kernel_by_phase),
        "copies": _copies(trace),
        "sync": _syncs(trace, profile),
        "idle": _idle_causes(trace, busy, spans),
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
    for i in sync.tolist():
        site = _call_site(profile, int(ev["tid"][i]), float(ev["start"][i]), float(ev["dur"][i]))
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


def _call_site(profile: Profile | None, tid: int, start: float, dur: float) -> str:
    """The innermost program frame of the samples a thread took during ``[start, start + dur]``."""
    if profile is None or not profile.num_samples:
        return ""
    threads = [i for i, t in enumerate(profile.threads) if t.tid == tid]
    if not threads:
        return ""
    rows = np.nonzero(
        np.isin(profile.sample_thread, threads)
        & (profile.sample_time >= start)
        & (profile.sample_time - profile.sample_wall <= start + dur)
    )[0]
    sites: Counter[str] = Counter()
    for r in rows.tolist():
        stack = int(profile.sample_stack[r])
        while stack >= 0:
            frame = profile.frames[int(profile.stack_frame[stack])]
            if frame.kind == "python" and category(frame) == "user":
                sites[f"{frame.name} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"] += 1
                break
            stack = int(profile.stack_parent[stack])
    return sites.most_common(1)[0][0] if sites else ""


def _idle_causes(trace: Trace, busy: np.ndarray, spans: list[tuple[float, float]]) -> dict[str, Any]:
    """What the host's busiest thread did while the device idled: waited for data, blocked in a
    sync, or ran Python and ops (the device waits for launches); and the resulting verdict."""
    ev = trace.events
    host = (ev["kind"] == OP) | (ev["kind"] == ANNOTATION) | (ev["kind"] == RUNTIME)
    if not host.any():
        return {}
    tids = ev["tid"][host & (ev["kind"] == OP)]
    if not len(tids):
        return {}
    main = Counter(tids.tolist()).most_common(1)[0][0]
    on_main = host & (ev["tid"] == main)
    start, end = ev["start"], ev["start"] + ev["dur"]

    def union(phase: str) -> np.ndarray:
        rows = on_main & (ev["phase"] == PHASES.index(phase))
        return merged_intervals(start[rows], end[rows])

    idle = np.concatenate([_gaps(busy, a, b) for a, b in spans]) if spans else np.zeros((0, 2))
    total = float((idle[:, 1] - idle[:, 0]).sum()) if len(idle) else 0.0
    wall = sum(b - a for a, b in spans)
    data, sync = _overlap(idle, union("data")), _overlap(idle, union("sync"))
    shares = {  # of the traced steps' wall time
        "data": data / wall if wall > 0 else 0.0,
        "sync": sync / wall if wall > 0 else 0.0,
        "host": max(total - data - sync, 0.0) / wall if wall > 0 else 0.0,
    }
    return {
        "seconds": total,
        "percent": 100 * total / wall if wall > 0 else 0.0,
        "data_percent": 100 * shares["data"],
        "sync_percent": 100 * shares["sync"],
        "host_percent": 100 * shares["host"],
        **device_verdict(shares),
    }


def device_verdict(shares: dict[str, float]) -> dict[str, Any]:
    """Why the device idles, from the shares of step time it idled while the host waited for data,
    blocked in syncs, or was busy itself. Input-bound keeps the samples' thresholds (20 % highly,
    5 % moderately); a sync or host share of 20 % names the bottleneck; else the device is the limit."""
    data = shares["data"]
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
