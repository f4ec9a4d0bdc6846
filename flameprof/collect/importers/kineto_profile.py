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

from collections.abc import Callable

import numpy as np

from ...model.counters import TORCH_ALLOCATED_BYTES
from ...model.phase_names import PHASES
from ...model.profile import Frame, Mark, ProcessInfo, Profile, ThreadInfo
from ...model.storage import ProfileWriter, trace_table
from ...model.trace import ANNOTATION, OP, RUNTIME, Trace, nesting_order
from .kineto import (
    LAYER_PREFIX,
    MODULE_PREFIX,
    STEP_PREFIXES,
    TraceDocument,
    _native,
    declared_phase,
    decode_document,
    read_trace,
    read_trace_columns,
    thread_numbers,
    unique_ids,
)


def read_kineto(data: bytes, source: str) -> Profile:
    """A Kineto Chrome trace (``.json`` or ``.json.gz``) as a Profile; one error line if it is not one."""
    return read_kineto_document(decode_document(data, source), source)


def read_kineto_document(document: TraceDocument, source: str) -> Profile:
    trace, epoch = read_trace(document, source)
    return profile_of_trace(trace, epoch)


ENGINE = Frame("autograd engine (backward)", kind="scope")


_CHUNK = 1 << 20  # events at a time, in the passes over every host event

HOST_COLUMNS = ("kind", "name", "start", "dur", "pid", "tid", "layer", "phase", "parent")


def host_events(trace: Trace) -> dict[str, np.ndarray]:
    """The columns the samples are made from, of the host events alone (ops, annotations, runtime
    calls): the trace's first rows, where the reader writes them (``parent`` then numbers them among
    themselves), as views, so that nothing the size of the trace is copied."""
    ev = trace.events
    host = np.isin(ev["kind"], (OP, ANNOTATION, RUNTIME))
    count = int(np.count_nonzero(host))
    if not host[:count].all():
        raise ValueError("a trace whose host events are not its first rows")
    return {name: ev[name][:count] for name in HOST_COLUMNS}


def thread_keys(hosts: dict[str, np.ndarray]) -> np.ndarray:
    """One int64 per event naming its (pid, tid)."""
    return hosts["pid"].astype(np.int64) * (1 << 32) + (hosts["tid"].astype(np.int64) & 0xFFFFFFFF)


def engine_roots(hosts: dict[str, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """The outermost events of the autograd engine's threads: those whose outermost events the
    reader made all backward, collectives or syncs, and some backward (see ``kineto.py``)."""
    roots = np.flatnonzero(hosts["parent"] < 0)
    phase = hosts["phase"][roots]
    backward = PHASES.index("backward")
    others = np.isin(phase, [backward, PHASES.index("comm"), PHASES.index("sync")], invert=True)
    engine = np.setdiff1d(keys[roots][phase == backward], keys[roots][others])
    return roots[np.isin(keys[roots], engine)]


def backward_waits(hosts: dict[str, np.ndarray], engine: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per event, the seconds of its own time (not in a child event) that overlap the outermost
    events of the autograd engine's threads of its process (``engine``); 0 on those threads."""
    pid, parent, start, dur = hosts["pid"], hosts["parent"], hosts["start"], hosts["dur"]
    n = len(pid)
    waits = np.zeros(n)
    engine_threads = np.unique(keys[engine])
    for process in np.unique(pid[engine]).tolist():
        roots = engine[pid[engine] == process]
        spans = sorted(zip(start[roots].tolist(), (start[roots] + dur[roots]).tolist()))
        merged: list[list[float]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        edges = np.asarray(merged).ravel()  # busy from each even edge to the next odd one
        busy = np.concatenate([[0.0], np.cumsum(np.diff(edges) * np.resize([1.0, 0.0], len(edges) - 1))])
        for part in _slices(n):
            mine = part.start + np.flatnonzero((pid[part] == process) & ~np.isin(keys[part], engine_threads))
            begin = start[mine]
            overlap = np.interp(begin + dur[mine], edges, busy) - np.interp(begin, edges, busy)
            inner = parent[mine] >= 0
            np.subtract.at(waits, parent[mine[inner]], overlap[inner])
            waits[mine] += overlap
    return np.maximum(waits, 0.0)


def _frames(
    names: list[str], hosts: dict[str, np.ndarray], order: np.ndarray, engine_frame: Frame | None
) -> tuple[list[Frame], np.ndarray, np.ndarray]:
    """The frames of the host events ``order`` (in the walk's order) numbered as the builder numbers
    them, in order of first use (the engine's first), and per event its own frame and its
    ``<layer> (backward)`` frame (-1 when it has none)."""
    kind, name, layer = hosts["kind"][order], hosts["name"][order], hosts["layer"][order]
    size = len(names) + 1
    layered = np.array([n.startswith((LAYER_PREFIX, MODULE_PREFIX)) for n in names] + [False])[name]
    layered &= kind == ANNOTATION  # its frame is its layer's: keyed by the layer, others by name and kind
    keys = np.where(layered, 8 * size + layer + 1, name.astype(np.int64) * 8 + kind)
    unique, own = unique_ids(keys, 9 * size + 1)
    del keys
    index: dict[Frame, int] = {}

    def number(frame: Frame) -> int:
        return index.setdefault(frame, len(index))

    if engine_frame is not None:
        number(engine_frame)
    own_of = np.array(
        [
            number(Frame(names[k - 8 * size - 1] if k > 8 * size else "", kind="layer"))
            if k >= 8 * size
            else number(_frame_of(names[k // 8], k % 8))
            for k in unique.tolist()
        ],
        dtype=np.int64,
    )
    own = own_of[own] if len(unique) else np.zeros(0, dtype=np.int64)
    parent = hosts["parent"][order]
    parent_layer = np.where(parent >= 0, hosts["layer"][np.maximum(parent, 0)] if len(order) else -1, -1)
    backward = (hosts["phase"][order] == PHASES.index("backward")) & (layer >= 0) & (layer != parent_layer)
    del parent, parent_layer
    layers, which = unique_ids(layer[backward].astype(np.int64), size)
    back_of = np.array(
        [number(Frame(f"{names[i]} (backward)", kind="layer")) for i in layers.tolist()], dtype=np.int64
    )
    back = np.full(len(order), -1, dtype=np.int64)
    if len(layers):
        back[backward] = back_of[which]
    frames = list(index)
    # the builder numbers frames as the walk first meets them: the engine's, then each event's
    # backward layer frame (at 2k) and its own (at 2k + 1)
    first = np.full(len(frames), 2 * len(order) + 1, dtype=np.int64)
    np.minimum.at(first, own, 2 * np.arange(len(own)) + 1)
    has_back = np.flatnonzero(back >= 0)
    np.minimum.at(first, back[has_back], 2 * has_back)
    if engine_frame is not None:
        first[0] = -1
    used = np.flatnonzero(first <= 2 * len(order))
    ranked = used[np.argsort(first[used], kind="stable")]
    renumber = np.full(len(frames) + 1, -1, dtype=np.int64)
    renumber[ranked] = np.arange(len(ranked))
    renumber = renumber.astype(np.int32)
    return [frames[i] for i in ranked.tolist()], renumber[own], renumber[back]


def _frame_of(text: str, kind: int) -> Frame:
    """The frame of an event other than a layer annotation (whose frame is its layer's)."""
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
    start = float(ev["start"].min()) if trace.num_events else 0.0
    stop = max((_end(*pair) for pair in _chunks(ev["start"], ev["dur"])), default=0.0)
    profile = profile_of_hosts(host_events(trace), trace.names, start, stop, epoch)
    profile.trace = trace
    profile.counters = memory_counters(trace.memory)
    return profile


def import_kineto(
    document: TraceDocument, source: str, out: ProfileWriter, check: Callable[[Profile], object]
) -> Profile:
    """Read a Kineto trace and write it to ``out`` as a profile, each of the trace's columns written
    to the file as soon as it is made, and dropped: the samples are made from the host events'
    columns alone (the whole profile is never held, nor the trace with its samples). ``check``
    refuses the profile (raising) before its samples are written. Returns the profile, without its
    trace."""
    columns, epoch = read_trace_columns(document, source)
    hosts: dict[str, np.ndarray] = {}
    start = stop = 0.0
    for key, (host, device) in columns.events():  # each written as one column, the host part kept
        out.column(f"trace_events_{key}", host, device)
        if key == "start":
            starts = (host, device)
        elif key == "dur":
            ends = [_end(*pair) for part in zip(starts, (host, device)) for pair in _chunks(*part)]
            start = min((float(part.min()) for part in starts if len(part)), default=0.0)
            stop = max(ends, default=0.0)
            del starts
        if key in HOST_COLUMNS:
            hosts[key] = host
        del host, device
    for key, column in columns.memory.items():
        out.column(f"trace_memory_{key}", column)
    out.table("trace.json", trace_table(columns.names, columns.steps, {}, columns.devices))
    counters = memory_counters(columns.memory)
    columns.memory = {}
    profile = profile_of_hosts(hosts, columns.names, start, stop, epoch)
    profile.counters = counters
    check(profile)
    out.profile(profile)
    return profile


def _end(start: np.ndarray, dur: np.ndarray) -> float:
    return float((start + dur).max())


def _chunks(start: np.ndarray, dur: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``start`` and ``dur`` a million events at a time (no temporary their size), none when empty."""
    return [(start[at], dur[at]) for at in _slices(len(start))]


def profile_of_hosts(
    hosts: dict[str, np.ndarray], names: list[str], start: float, stop: float, epoch: float
) -> Profile:
    """The samples (and frames, stacks, threads, step marks) made from the host events' columns
    (``HOST_COLUMNS``) of a trace whose events span ``start`` to ``stop``; its trace not attached."""
    n = len(hosts["kind"])
    parent = hosts["parent"]
    has_parent = np.flatnonzero(parent >= 0)
    children = np.bincount(parent[has_parent], weights=hosts["dur"][has_parent], minlength=n)
    own_time = np.maximum(hosts["dur"] - children, 0.0)
    del has_parent, children
    keys = thread_keys(hosts)  # (pid, tid) of each event, as one int64
    engine = engine_roots(hosts, keys)
    wait = np.minimum(backward_waits(hosts, engine, keys), own_time)
    del keys
    processes = [ProcessInfo(pid, "main") for pid in np.unique(hosts["pid"]).tolist()]
    # the walk: host events by start, the longer first (a parent before its children)
    order = nesting_order(hosts["start"], hosts["dur"]).astype(np.int32)
    frames, own, back = _frames(names, hosts, order, ENGINE if len(engine) else None)
    per_name, inverse = unique_ids(
        hosts["name"][order].astype(np.int64) * 8 + hosts["kind"][order], 8 * len(names)
    )
    phase_of = [declared_phase(k % 8, names[k // 8]) for k in per_name.tolist()]
    declared = np.array([p is not None for p in phase_of] + [False], dtype=bool)[inverse]
    step = np.array([names[k // 8].startswith(STEP_PREFIXES) for k in per_name.tolist()] + [False])[inverse]
    scope = np.array([f.kind == "scope" for f in frames], dtype=bool)[own]
    stepped = np.flatnonzero(scope & step)  # step annotations (a mark at each one's end), in the walk
    scope_phases: dict[str, str] = {}
    named = np.flatnonzero(scope & declared)
    for j in _last_of_each(own[named]).tolist():  # first met, with the phase it was last met with
        frame = frames[int(own[named[j]])]
        scope_phases[frame.name] = str(phase_of[inverse[named[j]]])
    del per_name, inverse, step, scope, named  # before the walk, where the most is held
    # per host event: its three frames (engine, backward layer, own)
    triple = np.full((n, 3), -1, dtype=np.int32)
    engine_root = np.zeros(n, dtype=bool)
    engine_root[engine] = True
    triple[order, 0] = np.where(engine_root[order] & ~declared, 0, -1)  # the engine's frame is frame 0
    del engine_root
    triple[order, 1] = back
    triple[order, 2] = own
    del back, own, declared
    waited = (wait > 0).astype(np.int8)
    sid = np.full(n, -1, dtype=np.int32)
    wait_sid = np.full(n, -1, dtype=np.int32)
    walk = (order.astype(np.int64), parent, triple.ravel(), waited, sid, wait_sid, np.zeros(1, np.int32))
    native = _native()
    stack_parent, stack_frame = native.stacks(*walk) if native is not None else _stack_walk(*walk)
    del walk, triple, waited
    thread, firsts = thread_numbers(hosts["pid"][order], hosts["tid"][order])
    met = order[firsts]
    threads = [ThreadInfo(p, t, "") for p, t in zip(hosts["pid"][met].tolist(), hosts["tid"][met].tolist())]
    at = order[stepped]
    ends = hosts["start"][at] + hosts["dur"][at]
    marks = [Mark(t, th, "step", "user") for t, th in zip(ends.tolist(), thread[stepped].tolist())]
    del stepped, at, ends
    # per event in the walk's order, its own time less its wait, then its wait (under the engine's
    # frame): a sample each, at the event's end, when not 0. Column by column, each input dropped
    # after its last use: the inputs and the columns together topped an import's memory
    busy = own_time
    busy -= wait
    del own_time
    kept = _kept(order, busy, wait)
    end = hosts["start"] + hosts["dur"]
    sample_time = _pairs(order, kept, end, end)
    del end
    event_thread = np.empty(n, dtype=np.int32)  # each event's thread, by the event as the trace has it
    event_thread[order] = thread
    del thread
    sample_thread = _pairs(order, kept, event_thread, event_thread, np.int32)
    del event_thread
    sample_stack = _pairs(order, kept, sid, wait_sid, np.int32)
    del sid, wait_sid
    sample_cpu = _pairs(order, kept, busy, 0.0)  # waiting: wall time, no CPU
    sample_wall = _pairs(order, kept, busy, wait)
    del order, busy, wait, kept
    return Profile(
        frames=frames,
        stack_parent=_int32(stack_parent),
        stack_frame=_int32(stack_frame),
        threads=threads,
        processes=processes,
        sample_time=sample_time,
        sample_thread=sample_thread,
        sample_stack=sample_stack,
        sample_wall=sample_wall,
        sample_cpu=sample_cpu,
        marks=sorted(marks, key=lambda mark: mark.time),
        meta=dict(
            start_time=epoch, duration=stop - min(start, 0.0), collector="kineto", scope_phases=scope_phases
        ),
    )


def _slices(n: int) -> list[slice]:
    """``0:n`` a million at a time: the passes over every event make no temporary the trace's size."""
    return [slice(low, min(low + _CHUNK, n)) for low in range(0, n, _CHUNK)]


def _kept(order: np.ndarray, busy: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """Per host event in the walk's ``order``, whether its busy time, then its wait, makes a sample."""
    kept = np.zeros(2 * len(order), dtype=bool)
    for part in _slices(len(order)):
        at = order[part]
        kept[2 * part.start : 2 * part.stop : 2] = busy[at] > 0
        kept[2 * part.start + 1 : 2 * part.stop : 2] = wait[at] > 0
    return kept


def _pairs(
    order: np.ndarray,
    kept: np.ndarray,
    first: np.ndarray,
    second: np.ndarray | float,
    dtype: type = np.float64,
) -> np.ndarray:
    """A sample column: per host event in the walk's ``order``, its value in ``first`` then in
    ``second`` (columns by the event), those ``kept`` alone; a million events at a time, so that no
    temporary is the size of the trace."""
    out: np.ndarray = np.empty(int(np.count_nonzero(kept)), dtype=dtype)
    filled = 0
    for part in _slices(len(order)):
        at = order[part]
        both: np.ndarray = np.empty((len(at), 2), dtype=dtype)
        both[:, 0] = first[at]
        both[:, 1] = second[at] if isinstance(second, np.ndarray) else second
        chosen = both.ravel()[kept[2 * part.start : 2 * part.stop]]
        out[filled : filled + len(chosen)] = chosen
        filled += len(chosen)
    return out


def _int32(column: bytearray | list[int]) -> np.ndarray:
    """A stack column from the C walk (bytes of int32) or the Python one (a list)."""
    return (
        np.frombuffer(column, dtype=np.int32)
        if isinstance(column, bytearray)
        else np.asarray(column, np.int32)
    )


def _last_of_each(keys: np.ndarray) -> np.ndarray:
    """Positions in ``keys`` of each distinct key's last occurrence, ordered by its first one."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    unique, first = np.unique(keys, return_index=True)
    last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
    return last[np.argsort(first, kind="stable")]


def memory_counters(mem: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The allocator's total over time (the device's when there is one, else the host's), from a
    trace's memory columns."""
    if not len(mem["time"]):
        return {}
    device = mem["device"]
    chosen = int(device[device >= 0][0]) if (device >= 0).any() else -1
    rows = np.nonzero(device == chosen)[0]
    order = rows[np.argsort(mem["time"][rows], kind="stable")]
    return {TORCH_ALLOCATED_BYTES: (mem["time"][order], mem["total"][order])}
