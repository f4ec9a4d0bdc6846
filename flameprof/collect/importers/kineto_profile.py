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

The samples, frames, stacks and threads are numbered as a ProfileBuilder fed the events one at a
time numbers them, but made with arrays (and the C walk of the stacks where it is built).
"""

from __future__ import annotations

import numpy as np

from ...model.counters import TORCH_ALLOCATED_BYTES
from ...model.phase_names import PHASES
from ...model.profile import Frame, Mark, ProcessInfo, Profile, ThreadInfo
from ...model.trace import ANNOTATION, OP, RUNTIME, Trace
from .kineto import (
    LAYER_PREFIX,
    MODULE_PREFIX,
    STEP_PREFIXES,
    TraceDocument,
    _native,
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


def _frames(
    trace: Trace, events: np.ndarray, engine_frame: Frame | None
) -> tuple[list[Frame], np.ndarray, np.ndarray]:
    """The frames of ``events`` (in the walk's order) numbered as the builder numbers them, in order
    of first use (the engine's first), and per event its own frame and its ``<layer> (backward)``
    frame (-1 when it has none)."""
    ev = trace.events
    kind, name, layer = ev["kind"][events], ev["name"][events], ev["layer"][events]
    parent = ev["parent"][events]
    parent_layer = np.where(parent >= 0, ev["layer"][np.maximum(parent, 0)] if trace.num_events else -1, -1)
    is_layer = np.zeros(len(events), dtype=bool)
    if len(trace.names):
        is_layer = (kind == ANNOTATION) & np.array(
            [n.startswith((LAYER_PREFIX, MODULE_PREFIX)) for n in trace.names], dtype=bool
        )[name]
    size = len(trace.names) + 1
    keys = (np.where(is_layer, layer, -1) + 1).astype(np.int64) * size * 8 + name.astype(np.int64) * 8 + kind
    unique, own = np.unique(keys, return_inverse=True)
    frames: list[Frame] = []
    index: dict[Frame, int] = {}

    def number(frame: Frame) -> int:
        return index.setdefault(frame, len(index))

    if engine_frame is not None:
        number(engine_frame)
    own_of = np.array(
        [number(_frame_of(trace, k // 8 % size, k % 8, k // (8 * size) - 1)) for k in unique.tolist()]
    )
    own = own_of[own.reshape(-1)] if len(unique) else np.zeros(0, dtype=np.int64)
    backward = (ev["phase"][events] == PHASES.index("backward")) & (layer >= 0) & (layer != parent_layer)
    layers, which = np.unique(layer[backward], return_inverse=True)
    back_of = np.array([number(Frame(f"{trace.names[i]} (backward)", kind="layer")) for i in layers.tolist()])
    back = np.full(len(events), -1, dtype=np.int64)
    if len(layers):
        back[backward] = back_of[which.reshape(-1)]
    frames = list(index)
    # the builder numbers frames as the walk first meets them: the engine's, then each event's
    # backward layer frame and its own
    seen = np.stack([back, own], axis=1).ravel()
    seen = np.concatenate([np.arange(1 if engine_frame is not None else 0), seen[seen >= 0]])
    ids, first = np.unique(seen, return_index=True)
    ranked = ids[np.argsort(first, kind="stable")]
    renumber = np.full(len(frames) + 1, -1, dtype=np.int64)
    renumber[ranked] = np.arange(len(ranked))
    return [frames[i] for i in ranked.tolist()], renumber[own], renumber[back]


def _frame_of(trace: Trace, name: int, kind: int, layer: int) -> Frame:
    text = trace.names[name]
    if kind == ANNOTATION and text.startswith((LAYER_PREFIX, MODULE_PREFIX)):
        return Frame(trace.name_of(layer), kind="layer")
    if kind == ANNOTATION:
        return Frame(text.split("#", 1)[0] if text.startswith(STEP_PREFIXES) else text, kind="scope")
    if declared_phase(kind, text) is not None:  # an autograd node, a sync: a scope with its phase
        return Frame(text, kind="scope")
    return Frame(text, kind="native")


def _stack_walk(order, parent, frames, waited, sid, wait_sid, engine) -> tuple[list[int], list[int]]:
    """The builder's interning of the walk's stacks in Python (where the C one is not built)."""
    ids: dict[tuple[int, int], int] = {}
    stack_parent: list[int] = []
    stack_frame: list[int] = []
    triples, parents, waits = frames.tolist(), parent.tolist(), waited.tolist()
    sids, wait_sids = sid.tolist(), wait_sid.tolist()
    engine_id = int(engine[0])
    for i in order.tolist():
        p = parents[i]
        s = sids[p] if p >= 0 and sids[p] >= 0 else -1
        chain = [f for f in triples[3 * i : 3 * i + 3] if f >= 0] + ([engine_id] if waits[i] else [])
        for j, f in enumerate(chain):
            key = (s, f)
            if key not in ids:
                ids[key] = len(stack_parent)
                stack_parent.append(s)
                stack_frame.append(f)
            if waits[i] and j == len(chain) - 1:
                wait_sids[i] = ids[key]
            else:
                s = ids[key]
        sids[i] = s
    sid[:] = sids
    wait_sid[:] = wait_sids
    return stack_parent, stack_frame


def profile_of_trace(trace: Trace, epoch: float) -> Profile:
    ev = trace.events
    host = np.nonzero(np.isin(ev["kind"], (OP, ANNOTATION, RUNTIME)))[0]
    children = np.zeros(trace.num_events)
    parent = ev["parent"]
    has_parent = parent[host] >= 0
    np.add.at(children, parent[host][has_parent], ev["dur"][host][has_parent])
    keys = thread_keys(trace)  # (pid, tid) of each event, as one int64
    engine = engine_roots(trace, host, keys)
    waits = backward_waits(trace, host, engine, keys)
    engine_root = np.zeros(trace.num_events, dtype=bool)
    engine_root[engine] = True
    # the walk: host events by start, the longer first (a parent before its children)
    order = host[np.lexsort((host, -ev["dur"][host], ev["start"][host]))]
    frames, own, back = _frames(trace, order, ENGINE if len(engine) else None)
    name, kind = ev["name"][order], ev["kind"][order]
    per_name, inverse = np.unique(name.astype(np.int64) * 8 + kind, return_inverse=True)
    phase_of = [declared_phase(k % 8, trace.names[k // 8]) for k in per_name.tolist()]
    inverse = inverse.reshape(-1)
    declared = np.array([p is not None for p in phase_of] + [False], dtype=bool)[inverse]
    step = np.array([trace.names[k // 8].startswith(STEP_PREFIXES) for k in per_name.tolist()] + [False])[
        inverse
    ]
    in_engine = np.where(engine_root[order] & ~declared, 0, -1)  # the engine's frame is frame 0
    # per event of the trace: its three frames (engine, backward layer, own), by trace index
    triple = np.full((trace.num_events, 3), -1, dtype=np.int32)
    triple[order] = np.stack([in_engine, back, own], axis=1)
    end = ev["start"][order] + ev["dur"][order]
    own_time = np.maximum(ev["dur"][order] - children[order], 0.0)
    wait = np.minimum(waits[order], own_time)
    waited = np.zeros(trace.num_events, dtype=np.int8)
    waited[order] = wait > 0
    sid = np.full(trace.num_events, -1, dtype=np.int32)
    wait_sid = np.full(trace.num_events, -1, dtype=np.int32)
    engine_id = np.zeros(1, dtype=np.int32)
    walk = (order.astype(np.int64), parent.astype(np.int32), triple.ravel(), waited, sid, wait_sid, engine_id)
    native = _native()
    stack_parent, stack_frame = native.stacks(*walk) if native is not None else _stack_walk(*walk)
    thread, firsts = _first_met(ev["pid"][order], ev["tid"][order])
    threads = [
        ThreadInfo(p, t, "")
        for p, t in zip(ev["pid"][order][firsts].tolist(), ev["tid"][order][firsts].tolist())
    ]
    # per event, its own time less its wait, then its wait (under the engine's frame), when not 0
    rows = np.stack([own_time > wait, wait > 0], axis=1)
    pick = rows.ravel()
    sample_stack = np.stack([sid[order], wait_sid[order]], axis=1).ravel()[pick]
    sample_wall = np.stack([own_time - wait, wait], axis=1).ravel()[pick]
    sample_cpu = np.stack([own_time - wait, np.zeros(len(order))], axis=1).ravel()[pick]
    sample_time = np.repeat(end, 2)[pick]
    sample_thread = np.repeat(thread, 2)[pick]
    scope = np.array([f.kind == "scope" for f in frames], dtype=bool)[own]
    marks = [
        Mark(t, int(th), "step", "user")
        for t, th in zip(end[scope & step].tolist(), thread[scope & step].tolist())
    ]
    scope_phases: dict[str, str] = {}
    named = np.nonzero(scope & declared)[0]
    for j in _last_of_each(own[named]).tolist():  # first met, with the phase it was last met with
        frame = frames[int(own[named[j]])]
        scope_phases[frame.name] = str(phase_of[inverse[named[j]]])
    start = float(ev["start"].min()) if trace.num_events else 0.0
    stop = float((ev["start"] + ev["dur"]).max()) if trace.num_events else 0.0
    profile = Profile(
        frames=frames,
        stack_parent=np.frombuffer(stack_parent, dtype=np.int32)
        if isinstance(stack_parent, bytearray)
        else np.asarray(stack_parent, dtype=np.int32),
        stack_frame=np.frombuffer(stack_frame, dtype=np.int32)
        if isinstance(stack_frame, bytearray)
        else np.asarray(stack_frame, dtype=np.int32),
        threads=threads,
        processes=[ProcessInfo(pid, "main") for pid in sorted(set(ev["pid"][host].tolist()))],
        sample_time=sample_time,
        sample_thread=sample_thread.astype(np.int32),
        sample_stack=sample_stack.astype(np.int32),
        sample_wall=sample_wall,
        sample_cpu=sample_cpu,
        marks=sorted(marks, key=lambda mark: mark.time),
        meta=dict(
            start_time=epoch, duration=stop - min(start, 0.0), collector="kineto", scope_phases=scope_phases
        ),
    )
    profile.trace = trace
    profile.counters = memory_counters(trace)
    return profile


def _first_met(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position, its (pid, tid)'s number in order of first appearance; and where each first appears."""
    n = len(pid)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    by = np.lexsort((np.arange(n), tid, pid))
    new = np.r_[True, (pid[by][1:] != pid[by][:-1]) | (tid[by][1:] != tid[by][:-1])]
    group = np.cumsum(new) - 1
    first = by[new]  # each group's first position (the sort keeps positions in order within one)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    number = np.empty(n, dtype=np.int64)
    number[by] = rank[group]
    return number, np.sort(first)


def _last_of_each(keys: np.ndarray) -> np.ndarray:
    """Positions in ``keys`` of each distinct key's last occurrence, ordered by its first one."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    unique, first = np.unique(keys, return_index=True)
    last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
    return last[np.argsort(first, kind="stable")]


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
