"""Read a torch.profiler (Kineto) Chrome trace into a ``Trace``: every host op, annotation and
runtime call, every device kernel, copy and fill, and every memory event, each attributed to a
layer path and a phase.

Attribution, from what the trace itself records:

* host events nest by time on their thread; an event without a layer or phase of its own takes its
  parent's;
* a layer is an annotation flameprof's window opens around each module call
  (``flameprof.layer: <path>``, the names the samples use) or torch.profiler's ``with_modules``
  events (``nn.Module: <name>``, nested into a dotted path);
* a backward op (``autograd::engine::evaluate_function: ...``) belongs to the forward layer of the
  op with the same autograd sequence number, and its children follow it;
* ``Optimizer.step#...``/``Optimizer.zero_grad#...`` are ``optimizer``, ``enumerate(DataLoader)#...``
  is ``data``, a module call ``forward`` (inside backward, as a recomputation, it stays backward),
  and so is a ``<Wrapper>.forward`` annotation (DistributedDataParallel's); an annotation named
  for a phase (``## forward ##``, ``backward``, ``## optimizer ##``, ...) is that phase; a
  collective (``c10d::``, ``nccl:``, ``gloo:`` ops and annotations, ``record_param_comms``) is
  ``comm``; a host call that waits for the device (``cudaDeviceSynchronize``, ...) ``sync``;
* the autograd engine's device threads (where an outermost ``evaluate_function`` runs the backward
  of an op another thread ran forward) do only ``backward`` work;
* a device event goes, through its correlation id, to the runtime call that launched it (its
  parent, whose start is the launch time), and so to the op around that call, its layer and its
  phase.

The events are read as columns (kineto_rows.py: by the C Scanner where it is built) and every pass
over them works on arrays; the three that are one walk each (nesting, attribution, and the stacks
in kineto_profile.py) run in C too, with a Python loop as their fallback.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from ...errors import FlameprofError
from ...model.phase_names import PHASES
from ...model.trace import (
    ANNOTATION,
    DEVICE_KINDS,
    EVENT_COLUMNS,
    MEMORY_COLUMNS,
    NO_PARENT,
    OP,
    RUNTIME,
    Trace,
    nesting_order,
)
from .json_stream import ByteSource, JsonDefect, Scan, stream_member
from .kineto_rows import (
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    MEMORY,
    MODULE_PREFIX,
    PYTHON,
    _int,
    _number,
    read_rows,
    scanner,
)
from .op_flops import op_flops

__all__ = ["DEVICE_CATEGORIES", "HOST_CATEGORIES", "MODULE_PREFIX", "_int", "_number"]

LAYER_PREFIX = "flameprof.layer: "
STEP_PREFIXES = ("ProfilerStep#", "flameprof.step#")  # torch.profiler's steps, the window's
SYNC_CALLS = frozenset(
    (
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    )
)
COMM_PREFIXES = ("c10d::", "nccl:", "gloo:", "mpi:", "ucc:", "record_param_comms")
# annotation names (lower case, without the #, = and spaces around them) that declare a phase
PHASE_WORDS = {
    "forward": "forward",
    "fwd": "forward",
    "backward": "backward",
    "bwd": "backward",
    "optimizer": "optimizer",
    "optimizer step": "optimizer",
    "optimizer_step": "optimizer",
    "zero_grad": "optimizer",
    "data": "data",
    "data loading": "data",
    "data_loading": "data",
    "dataloader": "data",
    "eval": "eval",
    "evaluation": "eval",
    "validation": "eval",
    "checkpoint": "checkpoint",
    "save checkpoint": "checkpoint",
}
EVALUATE_FUNCTION = "autograd::engine::evaluate_function:"
PHASE = {name: i for i, name in enumerate(PHASES)}
_NEST_SLACK = 1e-3  # microseconds: Kineto rounds times to nanoseconds, children may overhang by that


def declared_phase(kind: int, name: str) -> str | None:
    """The phase an event sets for itself and its children, or None when it inherits its parent's."""
    if kind in (OP, ANNOTATION) and name.startswith(COMM_PREFIXES):
        return "comm"
    if kind == ANNOTATION:
        if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            return "optimizer"
        if name.startswith("enumerate(DataLoader)#"):
            return "data"
        if name.endswith(".forward") and not name.startswith(LAYER_PREFIX):
            return "forward"
        return PHASE_WORDS.get(name.strip("#= ").lower())
    if kind == OP and name.startswith(EVALUATE_FUNCTION):
        return "backward"
    if kind == RUNTIME and name in SYNC_CALLS:
        return "sync"
    return None


@dataclass
class TraceDocument:
    """A Chrome trace read as a stream: ``events()`` yields its events one at a time and fills
    ``header`` with the document's other members (``baseTimeNanoseconds``, ...) as it goes; the
    file is read (and gunzipped) a chunk at a time, never held whole."""

    stream: ByteSource
    source: str
    header: dict[str, Any]

    def events(self, scan: Scan | None = None) -> Iterator[object]:
        """The events (those ``scan`` leaves to Python, when given), one at a time."""
        try:
            yield from stream_member(self.stream, "traceEvents", self.header, scan)
        except JsonDefect as exc:
            raise FlameprofError(f"{self.source}: not a readable trace: {exc}") from None
        except (OSError, EOFError, zlib.error) as exc:
            if isinstance(self.stream, gzip.GzipFile):
                raise FlameprofError(f"{self.source}: corrupt or truncated gzip data ({exc})") from None
            raise FlameprofError(f"cannot read {self.source}: {exc}") from None


def open_document(fh: BinaryIO, source: str) -> TraceDocument:
    """The trace in ``fh`` (gzip-compressed or not, told by its first bytes) ready to stream."""
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    stream: ByteSource = fh
    if head == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=fh, mode="rb")
    return TraceDocument(stream, source, {})


def decode_document(data: bytes, source: str) -> TraceDocument:
    """The trace held in ``data`` (gzip-compressed or not) ready to stream."""
    return open_document(io.BufferedReader(io.BytesIO(data)), source)


def _native() -> Any:
    """The C passes (flameprof._kineto), or None where the extension is not built."""
    try:
        from ... import _kineto
    except ImportError:
        return None
    return _kineto


def _prefixed(texts: list[str], prefixes: str | tuple[str, ...]) -> np.ndarray:
    """Per text id (and -1, last), whether the text starts with ``prefixes``."""
    return np.array([t.startswith(prefixes) for t in texts] + [False], dtype=bool)


@dataclass
class TraceColumns:
    """A trace read and attributed, whose event columns are made one at a time (``events``): an
    import writes each to its file and drops it, so the trace's columns are never all held."""

    names: list[str]
    steps: list[tuple[float, float]]
    devices: dict[int, tuple[str, int, int]]
    memory: dict[str, np.ndarray]
    parts: dict[str, Callable[[], tuple[Any, Any]]]  # per column, its host and device parts

    def events(self) -> Iterator[tuple[str, tuple[np.ndarray, np.ndarray]]]:
        """Each event column in turn (``EVENT_COLUMNS``' order) as its host part and its device part,
        made as they are asked for (and the parts they are made from dropped)."""
        for key, dtype in EVENT_COLUMNS.items():
            host, device = self.parts.pop(key)()
            yield (
                key,
                (
                    host.astype(dtype, casting="unsafe", copy=False),
                    device.astype(dtype, casting="unsafe", copy=False),
                ),
            )
            del host, device

    def trace(self) -> Trace:
        return Trace(
            names=self.names,
            events={key: np.concatenate(parts) for key, parts in self.events()},
            memory=self.memory,
            steps=self.steps,
            devices=self.devices,
        )


def read_trace(doc: TraceDocument, source: str, epoch: float | None = None) -> tuple[Trace, float]:
    """The attributed Trace of a decoded Kineto document, with times relative to ``epoch`` (seconds
    since the Unix epoch; the trace's first event when None). Returns the trace and the epoch used."""
    columns, epoch = read_trace_columns(doc, source, epoch)
    return columns.trace(), epoch


def read_trace_columns(
    doc: TraceDocument, source: str, epoch: float | None = None
) -> tuple[TraceColumns, float]:
    """``read_trace``, its event columns still to be made."""
    scan = scanner()
    rows = read_rows(doc.events(scan.feed if scan is not None else None), source, scan)
    texts: dict[str, int] = {}  # every distinct text (names, layer paths, input shapes) -> its id

    def text_id(text: str) -> int:
        return texts.setdefault(text, len(texts))

    names = np.array([text_id(t) for t in rows.names] + [-1], dtype=np.int32)[rows.take("name")]
    kind = rows.take("kind")
    python = kind == PYTHON
    keep = None
    if python.any():  # Python frames of with_stack, but for nn.Module's: the samples show them
        keep = ~python | _prefixed(list(texts), MODULE_PREFIX)[names]
        kind = np.where(python, ANNOTATION, kind).astype(np.int8)
    memory = kind == MEMORY
    device = np.isin(kind, DEVICE_KINDS)
    host = ~(memory | device)
    if keep is not None:
        memory, device, host = memory & keep, device & keep, host & keep
    h_name, d_name, h_kind = names[host], names[device], kind[host]
    h: dict[str, np.ndarray] = {"kind": h_kind}
    d: dict[str, np.ndarray] = {"kind": kind[device]}
    m: dict[str, np.ndarray] = {}
    del names, kind, python, keep
    # each column split as it is taken, into the groups that read it. The ids first, sequence
    # numbers and correlation ids narrowed when every one fits, so that the rows left have shrunk
    # when the times are split
    for key, groups in (
        ("a", (h, d, m)),
        ("b", (h, d, m)),
        ("c", (h, m)),
        ("d", (h, d)),
        ("ts", (h, d, m)),
        ("dur", (h, d, m)),
        ("x", (d, m)),
        ("dims", (h,)),
        ("concrete", (h,)),
        ("types", (h,)),
    ):
        column = rows.take(key)
        if key in ("c", "d"):
            column = _narrowed(column)
        for group in groups:
            group[key] = column[host if group is h else device if group is d else memory]
        del column
    del host, device, memory
    base_ns = _number(doc.header.get("baseTimeNanoseconds", 0), "baseTimeNanoseconds", source, 1e20)
    if not (len(h_kind) or len(d_name) or len(m["ts"])):
        raise FlameprofError(f"{source}: no op, kernel or memory event: not a torch.profiler trace")
    first = float(min(float(t.min()) for t in (h["ts"], d["ts"], m["ts"]) if len(t)))
    first_epoch = (first * 1e3 + base_ns) / 1e9
    epoch = first_epoch if epoch is None else epoch
    shift = first_epoch - epoch

    def seconds(us: np.ndarray) -> np.ndarray:
        """Times of the trace's clock (microseconds) as seconds from the epoch, converted in place:
        each column of them is the reader's own, and a temporary its size is saved."""
        us -= first
        us /= 1e6
        us += shift
        return us

    flops, shapes, types = _inputs(
        h_kind, h_name, h.pop("dims"), h.pop("concrete"), h.pop("types"), rows.values, texts
    )
    calls = _calls(h_kind, h.pop("d"), d.pop("d"))  # before the nesting: the correlation ids are dropped
    start, dur, pid, tid = h["ts"], h["dur"], h["a"], h["b"]
    parent, memory_event, order = _nest(pid, tid, start, dur, m.pop("a"), m.pop("b"), m["ts"])
    layer, phase = _attribute(Hosts(h_kind, h_name, start, pid, tid, h.pop("c"), parent), order, texts)
    del order
    launchers = _launchers(h_kind, parent, calls)
    is_step = _prefixed(list(texts), STEP_PREFIXES)[h_name]
    steps = sorted(zip(seconds(start[is_step]).tolist(), seconds(start[is_step] + dur[is_step]).tolist()))
    owned = launchers >= 0
    owner = np.where(owned, launchers, 0)
    owner_pid = pid[launchers[owned]]
    main_pid = 0  # a device event no runtime call launched belongs to the process that launched the most
    if len(owner_pid):
        pids, firsts, counts = np.unique(owner_pid, return_index=True, return_counts=True)
        main_pid = int(owner_pid[firsts[counts == counts.max()].min()])
    d_layer = np.where(owned, layer[owner] if len(layer) else -1, -1)
    final, trace_names = _first_seen([h_name, d_name, layer, d_layer, shapes, types], list(texts))
    n_host, n_device = len(h_kind), len(d_name)
    parts: dict[str, Callable[[], tuple[Any, Any]]] = {  # each column made, and its parts dropped, in turn
        "kind": lambda: (h.pop("kind"), d.pop("kind")),
        "name": lambda: (final[h_name], final[d_name]),
        "start": lambda: (seconds(h.pop("ts")), seconds(d.pop("ts"))),
        "dur": lambda: (h.pop("dur") / 1e6, d.pop("dur") / 1e6),
        "pid": lambda: (pid, np.where(owned, pid[owner] if n_host else 0, main_pid)),
        "tid": lambda: (h.pop("b"), d.pop("b")),
        "device": lambda: (np.full(n_host, -1, np.int32), d.pop("a")),
        "parent": lambda: (parent, calls),
        "layer": lambda: (final[layer], final[d_layer]),
        "phase": lambda: (phase, np.where(owned, phase[owner] if n_host else 0, PHASE["other"])),
        "flops": lambda: (flops, np.zeros(n_device)),
        "bytes": lambda: (np.zeros(n_host), d.pop("x")),
        "shapes": lambda: (final[shapes], np.full(n_device, -1, np.int32)),
        "types": lambda: (final[types], np.full(n_device, -1, np.int32)),
    }
    memory = {
        "time": seconds(m.pop("ts")),
        "delta": m.pop("x"),
        "total": m.pop("dur"),
        "device": m.pop("c").astype(MEMORY_COLUMNS["device"]),
        "event": memory_event,
    }
    return TraceColumns(trace_names, steps, _devices(doc.header), memory, parts), epoch


def _devices(header: dict[str, Any]) -> dict[int, tuple[str, int, int]]:
    """The trace's ``deviceProperties``: per device id its name and compute capability (-1 unknown);
    an entry without an integer id is left out."""
    out = {}
    entries = header.get("deviceProperties")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and type(entry.get("id")) is int and abs(entry["id"]) < 1 << 31:
            name = entry.get("name")
            major, minor = (_int(entry.get(key)) for key in ("computeMajor", "computeMinor"))
            out[entry["id"]] = (name if isinstance(name, str) else "", major, minor)
    return out


DENSE = 1 << 24  # keys below this are made unique by a table of that size (linear), others by sorting


def unique_ids(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of keys in [0, size): by a table when size is small
    (linear time), else by sorting."""
    if size > DENSE:
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, inverse.reshape(-1)
    present = np.zeros(size, dtype=bool)
    present[keys] = True
    return np.flatnonzero(present), (np.cumsum(present) - 1)[keys]


def first_positions(columns: list[np.ndarray], size: int) -> np.ndarray:
    """Per id in [0, size), where it first appears in ``columns`` one after the other (their total
    length where it does not); negative ids are none."""
    total = sum(len(c) for c in columns)
    first = np.full(size, total, dtype=np.int64)
    offset = 0
    for ids in columns:
        at = np.flatnonzero(ids >= 0)
        np.minimum.at(first, ids[at], at + offset)
        offset += len(ids)
    return first


def _first_seen(columns: list[np.ndarray], texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """The trace's names: the texts ``columns`` name, in the order they first appear one after the
    other, and per text id (and -1, last) its index among them or -1. (An event named "" has that
    name: layers and shapes are never empty, their -1 is none.)"""
    total = sum(len(c) for c in columns)
    first = first_positions(columns, len(texts))
    named = np.flatnonzero(first < total)
    ranked = named[np.argsort(first[named], kind="stable")]
    final = np.full(len(texts) + 1, -1, dtype=np.int32)
    final[ranked] = np.arange(len(ranked))
    return final, [texts[i] for i in ranked.tolist()]


def _inputs(
    kind: np.ndarray,
    name: np.ndarray,
    dims: np.ndarray,
    concrete: np.ndarray,
    types: np.ndarray,
    values: list,
    texts: dict,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLOPs, input shapes and input dtypes (text ids, or -1) of each op, computed once per distinct op
    name and inputs."""
    flops = np.zeros(len(kind))
    shapes = np.full(len(kind), -1, dtype=np.int32)
    dtypes = np.full(len(kind), -1, dtype=np.int32)
    ops = np.flatnonzero((kind == OP) & ((dims >= 0) | (concrete >= 0) | (types >= 0)))  # none: 0 and none
    if not len(ops):
        return flops, shapes, dtypes
    size = len(values) + 1
    pairs, pair = unique_ids((dims[ops] + 1).astype(np.int64) * size + concrete[ops] + 1, size * size)
    inputs, input_of = unique_ids(pair * size + types[ops] + 1, len(pairs) * size)
    del pair
    keys = name[ops].astype(np.int64) * len(inputs) + input_of
    del input_of
    triples, triple = unique_ids(keys, (len(texts) + 1) * len(inputs))
    del keys
    text_list = list(texts)
    op_flops_of = np.zeros(len(triples))
    shapes_of = np.full(len(triples), -1, dtype=np.int32)
    dtypes_of = np.full(len(triples), -1, dtype=np.int32)
    for j, key in enumerate(triples.tolist()):
        n, k = divmod(key, len(inputs))
        p, ti = divmod(int(inputs[k]), size)
        di, ci = divmod(int(pairs[p]), size)
        dims_value = values[di - 1] if di else None
        op_flops_of[j] = op_flops(text_list[n], dims_value, values[ci - 1] if ci else None)
        if dims_value:
            shapes_of[j] = texts.setdefault(json.dumps(dims_value, separators=(",", ":")), len(texts))
        types_value = values[ti - 1] if ti else None
        if types_value and isinstance(types_value, list) and all(isinstance(t, str) for t in types_value):
            dtypes_of[j] = texts.setdefault(json.dumps(types_value, separators=(",", ":")), len(texts))
    flops[ops] = op_flops_of[triple]
    shapes[ops] = shapes_of[triple]
    dtypes[ops] = dtypes_of[triple]
    return flops, shapes, dtypes


def _nest(
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    dur: np.ndarray,
    memory_pid: np.ndarray,
    memory_tid: np.ndarray,
    memory_ts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each host event's parent (the innermost event enclosing it on its thread), and the host event
    each memory event happened in; and the host events parents first (time order)."""
    n, m = len(start), len(memory_ts)
    by_time = nesting_order(start, dur)
    in_time = np.argsort(memory_ts, kind="stable")
    # the memory events among the host events by time, each after the events starting when it
    # happens (an allocation at an op's start is inside it)
    merged = np.insert(
        by_time, np.searchsorted(start[by_time], memory_ts[in_time], side="right"), in_time + n
    )
    del in_time
    thread, _ = thread_numbers(np.concatenate([pid, memory_pid]), np.concatenate([tid, memory_tid]))
    thread = thread[merged]
    by_thread = np.argsort(
        thread.astype(np.uint16) if len(thread) and thread.max() < 1 << 16 else thread, kind="stable"
    )
    order = merged[by_thread]
    thread = thread[by_thread]
    del merged, by_thread
    new_thread = np.ones(n + m, dtype=np.int8)
    new_thread[1:] = thread[1:] != thread[:-1]
    del thread
    time = np.concatenate([start, memory_ts])
    end = start + dur
    parent = np.full(n, NO_PARENT, dtype=np.int32)
    memory_event = np.full(m, NO_PARENT, dtype=np.int32)
    native = _native()
    if native is not None:
        native.nest(order.astype(np.int64, copy=False), new_thread, time, end, parent, memory_event)
    else:
        _nest_walk(order.tolist(), new_thread.tolist(), time.tolist(), end.tolist(), parent, memory_event)
    return parent, memory_event, by_time


def _narrowed(ids: np.ndarray) -> np.ndarray:
    """int64 ids (sequence numbers, correlation ids) as int32 when every one fits: the same values in
    half the memory, held through the passes."""
    if len(ids) and (int(ids.min()) < -(1 << 31) or int(ids.max()) >= 1 << 31):
        return ids
    return ids.astype(np.int32)


def thread_numbers(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position, its (pid, tid)'s number in order of first appearance; and where each first
    appears. Threads are few: each is found with one pass (sorting when there are many)."""
    n = len(pid)
    number = np.full(n, -1, dtype=np.int32)
    firsts: list[int] = []
    at = 0
    while at < n and len(firsts) < 64:
        mine = (pid == pid[at]) & (tid == tid[at])
        number[mine] = len(firsts)
        firsts.append(at)
        left = number[at:] < 0  # the next unnumbered position (no list of them all: up to n of them)
        first_left = int(left.argmax())
        at = at + first_left if left[first_left] else n
    if at >= n:
        return number, np.asarray(firsts, dtype=np.int64)
    by = np.lexsort((tid, pid))
    new = np.r_[True, (pid[by][1:] != pid[by][:-1]) | (tid[by][1:] != tid[by][:-1])]
    group = np.cumsum(new) - 1
    first = by[new]  # each group's first position (the sort is stable)
    rank = np.empty(len(first), dtype=np.int32)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    number[by] = rank[group]
    return number, np.sort(first)


def _nest_walk(
    order: list[int],
    new_thread: list[int],
    time: list[float],
    end: list[float],
    parent: np.ndarray,
    memory: np.ndarray,
) -> None:
    """The walk of ``_nest`` in Python (where the C one is not built)."""
    n = len(parent)
    parents, memory_event = parent.tolist(), memory.tolist()
    stack: list[int] = []
    for i, new in zip(order, new_thread):
        if new:
            stack = []
        if i >= n:
            at = time[i]
            while stack and end[stack[-1]] < at:
                stack.pop()
            memory_event[i - n] = stack[-1] if stack else NO_PARENT
            continue
        while stack and end[stack[-1]] + _NEST_SLACK < end[i]:
            stack.pop()
        parents[i] = stack[-1] if stack else NO_PARENT
        stack.append(i)
    parent[:] = parents
    memory[:] = memory_event


@dataclass
class Hosts:
    """The host events' columns the attribution reads (text ids for names)."""

    kind: np.ndarray
    name: np.ndarray
    start: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    seq: np.ndarray
    parent: np.ndarray


def autograd_threads(hosts: Hosts, texts: list[str]) -> np.ndarray:
    """Per host event, whether its thread is one of the autograd engine's device threads: an outermost
    ``evaluate_function`` on them runs the backward of an op that another thread ran forward (on a CPU
    the thread that calls ``backward()`` runs it, so a loop's own thread is never one)."""
    kind, name, start, pid, tid, seq, parent = (
        hosts.kind,
        hosts.name,
        hosts.start,
        hosts.pid,
        hosts.tid,
        hosts.seq,
        hosts.parent,
    )
    engine = np.zeros(len(kind), dtype=bool)
    roots = np.nonzero((parent == NO_PARENT) & _prefixed(texts, EVALUATE_FUNCTION)[name])[0]
    if not len(roots):
        return engine
    forward = np.nonzero((kind == OP) & (seq >= 0))[0]
    forward = forward[np.lexsort((forward, start[forward], seq[forward], pid[forward]))]
    if len(forward):  # the first op (earliest, then first read) of each (pid, sequence number)
        forward = forward[
            np.r_[True, (pid[forward][1:] != pid[forward][:-1]) | (seq[forward][1:] != seq[forward][:-1])]
        ]
    # each root's (pid, sequence number) found among the forward ops': sorted together, a root
    # comes after the forward op with its key
    both = np.concatenate([forward, roots])
    is_root = np.r_[np.zeros(len(forward), dtype=bool), np.ones(len(roots), dtype=bool)]
    merged = np.lexsort((is_root, seq[both], pid[both]))
    before = np.maximum.accumulate(np.where(is_root[merged], -1, np.arange(len(merged))))
    at = np.nonzero(is_root[merged])[0]
    root, candidate = both[merged[at]], before[at]
    forward_tid = tid[root].copy()
    found = candidate >= 0
    match = both[merged[candidate[found]]]
    same = (pid[match] == pid[root[found]]) & (seq[match] == seq[root[found]])
    forward_tid[np.nonzero(found)[0][same]] = tid[match[same]]
    threads = {
        (int(p), int(t))
        for p, t in zip(pid[root][forward_tid != tid[root]], tid[root][forward_tid != tid[root]])
    }
    for p, t in threads:
        engine |= (pid == p) & (tid == t)
    return engine


def _attribute(hosts: Hosts, order: np.ndarray, texts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Layer (a text id, or -1) and phase of every host event, in time order so forward ops precede
    their backward."""
    text_list = list(texts)
    engine = autograd_threads(hosts, text_list)
    kind, name, pid, seq, parent = hosts.kind, hosts.name, hosts.pid, hosts.seq, hosts.parent
    per_name, inverse = unique_ids(name.astype(np.int64) * 8 + kind, 8 * len(text_list))
    declared = np.full(len(per_name), -1, dtype=np.int8)
    mode = np.zeros(len(per_name), dtype=np.int8)  # 1: a layer annotation, 2: a module's
    layer_name = np.full(len(per_name), -1, dtype=np.int32)
    for j, key in enumerate(per_name.tolist()):
        text, k = text_list[key // 8], key % 8
        phase = declared_phase(k, text)
        declared[j] = -1 if phase is None else PHASE[phase]
        for which, prefix in ((1, LAYER_PREFIX), (2, MODULE_PREFIX)):
            if k == ANNOTATION and text.startswith(prefix):
                mode[j] = which
                rest = text[len(prefix) :]
                layer_name[j] = texts.setdefault(rest, len(texts)) if rest else -1
                break
    n = len(kind)
    layer = np.full(n, -1, dtype=np.int32)
    phase_of = np.full(n, PHASE["other"], dtype=np.int8)
    base = len(texts)  # ids of layer paths made of a module's parent's and its name count on from here
    codes = np.array(
        [PHASE["other"], PHASE["backward"], PHASE["forward"], PHASE["sync"], base], dtype=np.int32
    )
    declared_of, mode_of, layer_of = declared[inverse], mode[inverse], layer_name[inverse]
    del inverse
    arrays = (  # the C walk's types; copies only where a column is narrower
        order.astype(np.int64, copy=False),
        parent.astype(np.int32, copy=False),
        kind.astype(np.int8, copy=False),
        declared_of,
        mode_of,
        layer_of,
        pid.astype(np.int64),
        seq.astype(np.int64, copy=False),
        engine.view(np.int8),
        layer,
        phase_of,
        codes,
    )
    native = _native()
    composed = native.attribute(*arrays) if native is not None else _attribute_walk(*arrays)
    if composed:
        text_list = list(texts)
        made: list[str] = []
        for up, leaf in composed:
            path = text_list[up] if up < base else made[up - base]
            made.append(f"{path}.{text_list[leaf] if leaf >= 0 else ''}")
        ids = np.array([texts.setdefault(t, len(texts)) for t in made], dtype=np.int32)
        layer = np.where(layer >= base, ids[np.maximum(layer - base, 0)], layer).astype(np.int32)
    return layer, phase_of


def _attribute_walk(
    order, parent, kind, declared, mode, layer_name, pid, seq, engine, layer, phase_of, codes
) -> list[tuple[int, int]]:
    """The walk of ``_attribute`` in Python (where the C one is not built); fills ``layer`` and
    ``phase_of`` and returns the (parent layer, module name) of each composed layer id."""
    other, backward, forward, sync, next_id = codes.tolist()
    forward_layer: dict[tuple[int, int], int] = {}
    composed: dict[tuple[int, int], int] = {}
    parents, kinds, decl, modes, leaves = (
        parent.tolist(),
        kind.tolist(),
        declared.tolist(),
        mode.tolist(),
        layer_name.tolist(),
    )
    pids, seqs, engines = pid.tolist(), seq.tolist(), engine.tolist()
    layers, phases = layer.tolist(), phase_of.tolist()
    for i in order.tolist():
        p = parents[i]
        lay = layers[p] if p >= 0 else -1
        ph = phases[p] if p >= 0 else backward if engines[i] else other
        declared_i = decl[i]
        if declared_i >= 0 and not (declared_i == sync and ph == backward):
            ph = declared_i
        if kinds[i] == ANNOTATION and modes[i]:
            if modes[i] == 1 or lay < 0:
                lay = leaves[i]
            else:
                key = (lay, leaves[i])
                if key not in composed:
                    composed[key] = next_id
                    next_id += 1
                lay = composed[key]
            ph = backward if ph == backward else forward
        if seqs[i] >= 0 and kinds[i] == OP:
            key = (pids[i], seqs[i])
            if ph == backward and declared_i == backward:
                lay = forward_layer.get(key, lay)
            elif ph != backward and lay >= 0 and key not in forward_layer:
                forward_layer[key] = lay
        layers[i], phases[i] = lay, ph
    layer[:] = layers
    phase_of[:] = phases
    return list(composed)


def _calls(kind: np.ndarray, correlation: np.ndarray, device_correlation: np.ndarray) -> np.ndarray:
    """For each device event, the runtime call that launched it (the last one with the same
    correlation id), NO_PARENT when the trace holds no such call."""
    calls = np.full(len(device_correlation), NO_PARENT, dtype=np.int32)
    runtime = np.nonzero((kind == RUNTIME) & (correlation >= 0))[0]
    if len(runtime) and len(calls):
        runtime = runtime[np.lexsort((runtime, correlation[runtime]))]
        last = np.r_[correlation[runtime][1:] != correlation[runtime][:-1], True]
        keys, call_of = correlation[runtime][last], runtime[last]
        at = np.minimum(np.searchsorted(keys, device_correlation), len(keys) - 1)
        calls = np.where(keys[at] == device_correlation, call_of[at], NO_PARENT).astype(np.int32)
    return calls


def _launchers(kind: np.ndarray, parent: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each device event, the host op around the runtime call that launched it (``calls``), or the
    call itself when no op encloses it (the event's layer and phase); NO_PARENT when it has no call."""
    launcher = calls.astype(np.int64)
    while True:
        walking = np.nonzero(launcher >= 0)[0]
        walking = walking[kind[launcher[walking]] != OP]
        if not len(walking):
            break
        launcher[walking] = parent[launcher[walking]]
    return np.where(launcher >= 0, launcher, calls).astype(np.int32)
