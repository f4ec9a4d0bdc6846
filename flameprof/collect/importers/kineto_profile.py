"""A torch.profiler (Kineto) trace made elsewhere as a whole ``Profile``: the attributed ``Trace``
itself, and host samples made from it, so every view, phase table and report works on it.

Each host event becomes one sample of its own (self) time on its thread, at its end, whose stack is
the event's nesting: annotations and ops as frames, a layer annotation as a ``layer`` frame, and
the backward op of a layer under a ``<layer> (backward)`` frame. Phase annotations are scopes with
their phase declared (``meta['scope_phases']``), as a user's ``flameprof.scope(..., phase=)`` is.
The autograd engine's work on its own thread, and the time another thread of the process spends
in none of its traced events while that work runs (the loop waiting in ``backward()``, whose
Python frames a trace does not hold), go under an ``autograd engine (backward)`` frame.
Device activity stays in the trace (its own timeline, not a host thread's time).
"""

from __future__ import annotations

import numpy as np

from ...model.builder import ProfileBuilder
from ...model.counters import TORCH_ALLOCATED_BYTES
from ...model.phase_names import PHASES
from ...model.profile import Frame, Mark, ProcessInfo, Profile
from ...model.trace import ANNOTATION, OP, RUNTIME, Trace
from .kineto import (
    LAYER_PREFIX,
    MODULE_PREFIX,
    STEP_PREFIXES,
    TraceDocument,
    declared_phase,
    decode_document,
    read_trace,
)


def read_kineto(data: bytes, source: str) -> Profile:
    """A Kineto Chrome trace (``.json`` or ``.json.gz``) as a Profile; one error line if it is not one."""
    return read_kineto_document(decode_document(data, source), source)


def read_kineto_document(document: TraceDocument, source: str) -> Profile:
    trace, epoch = read_trace(document, source)
    return profile_of_trace(trace, epoch)


def _frame(trace: Trace, i: int) -> Frame:
    ev = trace.events
    kind, name = int(ev["kind"][i]), trace.names[int(ev["name"][i])]
    if kind == ANNOTATION and name.startswith((LAYER_PREFIX, MODULE_PREFIX)):
        return Frame(trace.name_of(int(ev["layer"][i])), kind="layer")
    if kind == ANNOTATION:
        return Frame(name.split("#", 1)[0] if name.startswith(STEP_PREFIXES) else name, kind="scope")
    if declared_phase(kind, name) is not None:  # an autograd node, a sync: a scope with its phase
        return Frame(name, kind="scope")
    return Frame(name, kind="native")


ENGINE = Frame("autograd engine (backward)", kind="scope")


def thread_keys(trace: Trace) -> np.ndarray:
    """One int64 per event naming its (pid, tid)."""
    ev = trace.events
    return ev["pid"].astype(np.int64) * (1 << 32) + (ev["tid"].astype(np.int64) & 0xFFFFFFFF)


def engine_roots(trace: Trace, host: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The outermost events of the autograd engine's threads: those whose outermost events the
    reader made all backward, collectives or syncs, and some backward (see ``kineto.py``)."""
    ev = trace.events
    roots = host[ev["parent"][host] < 0]
    phase = ev["phase"][roots]
    backward = PHASES.index("backward")
    others = np.isin(phase, [backward, PHASES.index("comm"), PHASES.index("sync")], invert=True)
    engine = np.setdiff1d(keys[roots][phase == backward], keys[roots][others])
    return roots[np.isin(keys[roots], engine)]


def backward_waits(trace: Trace, host: np.ndarray, engine: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per event, the seconds of its own time (not in a child event) that overlap the outermost
    events of the autograd engine's threads of its process (``engine``); 0 on those threads."""
    ev = trace.events
    waits = np.zeros(trace.num_events)
    start, end = ev["start"], ev["start"] + ev["dur"]
    engine_threads = np.unique(keys[engine])
    for pid in np.unique(ev["pid"][engine]).tolist():
        roots = engine[ev["pid"][engine] == pid]
        spans = sorted(zip(start[roots].tolist(), end[roots].tolist()))
        merged: list[list[float]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        edges = np.asarray(merged).ravel()  # busy from each even edge to the next odd one
        busy = np.concatenate([[0.0], np.cumsum(np.diff(edges) * np.resize([1.0, 0.0], len(edges) - 1))])
        mine = host[(ev["pid"][host] == pid) & ~np.isin(keys[host], engine_threads)]
        overlap = np.zeros(trace.num_events)
        overlap[mine] = np.interp(end[mine], edges, busy) - np.interp(start[mine], edges, busy)
        inner = mine[ev["parent"][mine] >= 0]
        np.add.at(waits, ev["parent"][inner], -overlap[inner])
        waits[mine] += overlap[mine]
    return np.maximum(waits, 0.0)


def profile_of_trace(trace: Trace, epoch: float) -> Profile:
    ev = trace.events
    builder = ProfileBuilder()
    host = np.nonzero(np.isin(ev["kind"], (OP, ANNOTATION, RUNTIME)))[0]
    backward = PHASES.index("backward")
    children = np.zeros(trace.num_events)
    parent = ev["parent"]
    has_parent = parent[host] >= 0
    np.add.at(children, parent[host][has_parent], ev["dur"][host][has_parent])
    keys = thread_keys(trace)  # (pid, tid) of each event, as one int64
    engine = engine_roots(trace, host, keys)
    waits = backward_waits(trace, host, engine, keys)
    engine_root = np.zeros(trace.num_events, dtype=bool)
    engine_root[engine] = True
    engine_frame = builder.frame(ENGINE) if len(engine) else -1
    order = sorted(host.tolist(), key=lambda i: (float(ev["start"][i]), -float(ev["dur"][i])))
    stack: dict[int, int] = {}
    scope_phases: dict[str, str] = {}
    marks: list[Mark] = []
    for i in order:
        p = int(parent[i])
        base = stack.get(p, -1) if p >= 0 else -1
        frames = []
        layer = int(ev["layer"][i])
        parent_layer = int(ev["layer"][p]) if p >= 0 else -1
        phase = declared_phase(int(ev["kind"][i]), trace.names[int(ev["name"][i])])
        if engine_root[i] and phase is None:
            frames.append(engine_frame)
        if ev["phase"][i] == backward and layer >= 0 and layer != parent_layer:
            frames.append(builder.frame(Frame(f"{trace.names[layer]} (backward)", kind="layer")))
        frame = _frame(trace, i)
        if frame.kind == "scope" and phase is not None:
            scope_phases[frame.name] = phase
        frames.append(builder.frame(frame))
        sid = base
        for fid in frames:
            sid = builder.stack_id([fid], parent=sid)
        stack[i] = sid
        thread = builder.thread_id(int(ev["pid"][i]), int(ev["tid"][i]))
        end = float(ev["start"][i] + ev["dur"][i])
        own = max(float(ev["dur"][i] - children[i]), 0.0)
        wait = min(float(waits[i]), own)
        if own > wait:
            builder.add_sample(end, thread, sid, own - wait, own - wait)
        if wait > 0:
            waited = builder.stack_id([engine_frame], parent=sid)
            builder.add_sample(end, thread, waited, wait, 0.0)  # waiting: wall time, no CPU
        if frame.kind == "scope" and trace.names[int(ev["name"][i])].startswith(STEP_PREFIXES):
            marks.append(Mark(end, thread, "step", "user"))
    for pid in sorted({int(ev["pid"][i]) for i in host.tolist()}):
        builder.process(ProcessInfo(pid, "main"))
    builder.marks.extend(marks)
    start = float(ev["start"].min()) if trace.num_events else 0.0
    end = float((ev["start"] + ev["dur"]).max()) if trace.num_events else 0.0
    builder.meta.update(
        start_time=epoch,
        duration=end - min(start, 0.0),
        collector="kineto",
        scope_phases=scope_phases,
    )
    profile = builder.build()
    profile.trace = trace
    profile.counters = memory_counters(trace)
    return profile


def memory_counters(trace: Trace) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The allocator's total over time (the device's when there is one, else the host's)."""
    mem = trace.memory
    if not len(mem["time"]):
        return {}
    device = mem["device"]
    chosen = int(device[device >= 0][0]) if (device >= 0).any() else -1
    rows = np.nonzero(device == chosen)[0]
    order = rows[np.argsort(mem["time"][rows], kind="stable")]
    return {TORCH_ALLOCATED_BYTES: (mem["time"][order], mem["total"][order])}
