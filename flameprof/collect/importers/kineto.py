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
"""

from __future__ import annotations

import gzip
import io
import json
import math
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from ...errors import FlameprofError
from ...model.phase_names import PHASES
from ...model.trace import (
    ANNOTATION,
    EVENT_COLUMNS,
    KERNEL,
    MEMCPY,
    MEMORY_COLUMNS,
    MEMSET,
    NO_PARENT,
    OP,
    RUNTIME,
    Trace,
)
from .json_stream import ByteSource, JsonDefect, stream_member
from .op_flops import op_flops

LAYER_PREFIX = "flameprof.layer: "
MODULE_PREFIX = "nn.Module: "
STEP_PREFIXES = ("ProfilerStep#", "flameprof.step#")  # torch.profiler's steps, the window's
HOST_CATEGORIES = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": ANNOTATION,
    "python_function": ANNOTATION,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "runtime": RUNTIME,
    "xpu_runtime": RUNTIME,
}
DEVICE_CATEGORIES = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
}
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


@dataclass(slots=True)
class _Host:
    kind: int
    name: str
    start: float  # microseconds, as in the trace
    dur: float
    pid: int
    tid: int
    seq: int
    correlation: int
    flops: float
    shapes: str
    parent: int = NO_PARENT
    layer: str = ""
    phase: str = "other"


def _number(value: object, what: str, where: str, limit: float = 1e18) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise FlameprofError(f"{where}: {what} is not a number")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise FlameprofError(f"{where}: {what} is not a number") from None
    if not math.isfinite(number) or abs(number) > limit:
        raise FlameprofError(f"{where}: {what} is out of range")
    return number


_PLAIN = (int, float)  # exact types: bool is refused


def _int(value: object, default: int = -1) -> int:
    if type(value) is int and -(1 << 62) < value < 1 << 62:
        return value
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if abs(value) < 1 << 62 else default
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 19:
        return int(value)
    return default


@dataclass
class TraceDocument:
    """A Chrome trace read as a stream: ``events()`` yields its events one at a time and fills
    ``header`` with the document's other members (``baseTimeNanoseconds``, ...) as it goes; the
    file is read (and gunzipped) a chunk at a time, never held whole."""

    stream: ByteSource
    source: str
    header: dict[str, Any]

    def events(self) -> Iterator[object]:
        try:
            yield from stream_member(self.stream, "traceEvents", self.header)
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


def read_trace(doc: TraceDocument, source: str, epoch: float | None = None) -> tuple[Trace, float]:
    """The attributed Trace of a decoded Kineto document, with times relative to ``epoch`` (seconds
    since the Unix epoch; the trace's first event when None). Returns the trace and the epoch used."""
    hosts: list[_Host] = []
    devices: list[tuple] = []  # (kind, name, start, dur, device, stream, correlation, bytes)
    memory: list[tuple] = []  # (ts, pid, tid, delta, total, device)
    steps: list[tuple[float, float]] = []
    for index, event in enumerate(doc.events()):
        if not isinstance(event, dict):
            raise FlameprofError(f"{source}: trace event {index} is not an object")
        phase_char = event.get("ph")
        if phase_char == "X":
            _read_complete(event, index, source, hosts, devices, steps)
        elif phase_char == "i" and event.get("name") == "[memory]":
            where = f"{source}: trace event {index}"
            args = event.get("args")
            if not isinstance(args, dict):
                args = {}
            device = -1 if _int(args.get("Device Type"), 0) == 0 else _int(args.get("Device Id"), 0)
            memory.append(
                (
                    _number(event.get("ts"), "ts", where),
                    _int(event.get("pid")),
                    _int(event.get("tid")),
                    _number(args.get("Bytes", 0), "Bytes", where),
                    _number(args.get("Total Allocated", 0), "Total Allocated", where),
                    device,
                )
            )
    base_ns = _number(doc.header.get("baseTimeNanoseconds", 0), "baseTimeNanoseconds", source, 1e20)
    starts = [h.start for h in hosts] + [d[2] for d in devices] + [m[0] for m in memory]
    if not starts:
        raise FlameprofError(f"{source}: no op, kernel or memory event: not a torch.profiler trace")
    first = min(starts)
    first_epoch = (first * 1e3 + base_ns) / 1e9
    epoch = first_epoch if epoch is None else epoch
    shift = first_epoch - epoch

    def seconds(us: float) -> float:
        return (us - first) / 1e6 + shift

    order, memory_event = _nest(hosts, memory)
    _attribute(hosts, order)
    calls, launchers = _launchers(hosts, devices)
    return _columns(hosts, devices, calls, launchers, memory, memory_event, steps, seconds), epoch


def _read_complete(event: dict, index: int, source: str, hosts: list, devices: list, steps: list) -> None:
    category = str(event.get("cat", "")).lower()
    kind = HOST_CATEGORIES.get(category, DEVICE_CATEGORIES.get(category))
    if kind is None:
        return
    name = event.get("name")
    name = sys.intern(name if isinstance(name, str) else str(name))  # one string per distinct op name
    if category == "python_function" and not name.startswith(MODULE_PREFIX):
        return  # Python frames of with_stack: the samples show the Python side
    start: Any = event.get("ts")  # a JSON value: checked next
    dur: Any = event.get("dur", 0)
    if type(start) in _PLAIN and type(dur) in _PLAIN and -1e18 <= start <= 1e18 and 0 <= dur <= 1e18:
        start, dur = float(start), float(dur)  # the common case, without building a message
    else:
        where = f"{source}: trace event {index} ({name[:60]!r})"
        start = _number(start, "ts", where)
        dur = _number(dur, "dur", where)
        if dur < 0:
            raise FlameprofError(f"{where}: negative duration")
    args = event.get("args")
    if not isinstance(args, dict):
        args = {}
    if category in DEVICE_CATEGORIES:
        size = args.get("bytes", 0)
        devices.append(
            (
                kind,
                name,
                start,
                dur,
                _int(args.get("device"), _int(event.get("pid"), 0)),
                _int(args.get("stream"), _int(event.get("tid"), 0)),
                _int(args.get("correlation")),
                _number(size, "bytes", f"{source}: trace event {index} ({name[:60]!r})")
                if size not in (None, "")
                else 0.0,
            )
        )
        return
    if name.startswith(STEP_PREFIXES):
        steps.append((start, start + dur))
    dims = args.get("Input Dims")
    hosts.append(
        _Host(
            kind=kind,
            name=name,
            start=start,
            dur=dur,
            pid=_int(event.get("pid"), 0),
            tid=_int(event.get("tid"), 0),
            seq=_int(args.get("Sequence number")),
            correlation=_int(args.get("correlation", args.get("External id") if kind == RUNTIME else None)),
            flops=op_flops(name, dims, args.get("Concrete Inputs")) if kind == OP else 0.0,
            shapes=sys.intern(json.dumps(dims, separators=(",", ":"))) if kind == OP and dims else "",
        )
    )


def _nest(hosts: list[_Host], memory: list[tuple]) -> tuple[list[int], list[int]]:
    """Set each host event's parent (the innermost event enclosing it on its thread), and find the
    host event each memory event happened in. Returns the host events parents first, and the latter.
    Sorted by numpy on columns: a sort key tuple per event would take more than the trace itself."""
    n, m = len(hosts), len(memory)
    pid = np.fromiter((h.pid for h in hosts), np.int64, n)
    tid = np.fromiter((h.tid for h in hosts), np.int64, n)
    start = np.fromiter((h.start for h in hosts), np.float64, n)
    dur = np.fromiter((h.dur for h in hosts), np.float64, n)
    rows = np.arange(n + m)
    order = np.lexsort(
        (
            rows,
            np.concatenate([-dur, np.zeros(m)]),
            np.concatenate([np.zeros(n), np.ones(m)]),  # an allocation at an op's start is inside it
            np.concatenate([start, np.fromiter((e[0] for e in memory), np.float64, m)]),
            np.concatenate([tid, np.fromiter((e[2] for e in memory), np.int64, m)]),
            np.concatenate([pid, np.fromiter((e[1] for e in memory), np.int64, m)]),
        )
    )
    memory_event = [NO_PARENT] * m
    stack: list[int] = []
    thread = None
    for i in order.tolist():
        host = hosts[i] if i < n else None
        key = (host.pid, host.tid) if host else (memory[i - n][1], memory[i - n][2])
        if key != thread:
            thread, stack = key, []
        if host is None:
            at = memory[i - n][0]
            while stack and hosts[stack[-1]].start + hosts[stack[-1]].dur < at:
                stack.pop()
            memory_event[i - n] = stack[-1] if stack else NO_PARENT
            continue
        end = host.start + host.dur
        while stack and hosts[stack[-1]].start + hosts[stack[-1]].dur + _NEST_SLACK < end:
            stack.pop()
        host.parent = stack[-1] if stack else NO_PARENT
        stack.append(i)
    return np.lexsort((rows[:n], -dur, start)).tolist(), memory_event


def autograd_threads(hosts: list[_Host]) -> set[tuple[int, int]]:
    """The (pid, tid) of the autograd engine's device threads: an outermost ``evaluate_function`` on
    them runs the backward of an op that another thread ran forward (on a CPU the thread that calls
    ``backward()`` runs it, so a loop's own thread is never one)."""
    forward: dict[tuple[int, int], tuple[float, int]] = {}  # (pid, sequence number) -> its first op
    for host in hosts:
        if host.kind == OP and host.seq >= 0:
            key = (host.pid, host.seq)
            if key not in forward or host.start < forward[key][0]:
                forward[key] = (host.start, host.tid)
    return {
        (host.pid, host.tid)
        for host in hosts
        if host.parent == NO_PARENT
        and host.name.startswith(EVALUATE_FUNCTION)
        and forward.get((host.pid, host.seq), (0.0, host.tid))[1] != host.tid
    }


def _attribute(hosts: list[_Host], order: list[int]) -> None:
    """Layer and phase of every host event, in time order so forward ops precede their backward."""
    forward_layer: dict[tuple[int, int], str] = {}  # (pid, sequence number) -> forward layer
    engine = autograd_threads(hosts)
    for i in order:
        host = hosts[i]
        parent = hosts[host.parent] if host.parent >= 0 else None
        layer = parent.layer if parent else ""
        phase = parent.phase if parent else "backward" if (host.pid, host.tid) in engine else "other"
        declared = declared_phase(host.kind, host.name)
        if declared is not None and not (declared == "sync" and phase == "backward"):
            phase = declared
        if host.kind == ANNOTATION and host.name.startswith(LAYER_PREFIX):
            layer = host.name[len(LAYER_PREFIX) :]
            phase = "backward" if phase == "backward" else "forward"
        elif host.kind == ANNOTATION and host.name.startswith(MODULE_PREFIX):
            name = host.name[len(MODULE_PREFIX) :]
            layer = f"{layer}.{name}" if layer else name
            phase = "backward" if phase == "backward" else "forward"
        if host.seq >= 0 and host.kind == OP:
            key = (host.pid, host.seq)
            if phase == "backward" and declared == "backward":
                layer = forward_layer.get(key, layer)
            elif phase != "backward" and layer and key not in forward_layer:
                forward_layer[key] = layer
        host.layer, host.phase = layer, phase


def _launchers(hosts: list[_Host], devices: list[tuple]) -> tuple[list[int], list[int]]:
    """For each device event, the runtime call that launched it (the one with the same correlation
    id), and the host op around that call, or the call itself when no op encloses it (the event's
    layer and phase); NO_PARENT for both when the trace holds no such call."""
    runtime: dict[int, int] = {}
    for i, host in enumerate(hosts):
        if host.kind == RUNTIME and host.correlation >= 0:
            runtime[host.correlation] = i
    calls, owners = [], []
    for device in devices:
        call = runtime.get(device[6], NO_PARENT)
        launcher = call
        while launcher >= 0 and hosts[launcher].kind != OP:
            launcher = hosts[launcher].parent
        calls.append(call)
        owners.append(launcher if launcher >= 0 else call)
    return calls, owners


def _columns(hosts, devices, calls, launchers, memory, memory_event, steps, seconds) -> Trace:
    """The attributed events as the model's columns, each filled straight into its array (a list of
    boxed values per column would take several times the trace's own size)."""
    names: dict[str, int] = {}

    def intern(text: str) -> int:
        return names.setdefault(text, len(names)) if text else -1

    owners = [hosts[p] if p >= 0 else None for p in launchers]
    other = PHASE["other"]
    # a device event no runtime call launched belongs to the process that launched the most
    process = Counter(h.pid for h in owners if h is not None).most_common(1)
    main_pid = process[0][0] if process else 0
    host_values = {
        "kind": lambda h: h.kind,
        "name": lambda h: intern(h.name),
        "start": lambda h: seconds(h.start),
        "dur": lambda h: h.dur / 1e6,
        "pid": lambda h: h.pid,
        "tid": lambda h: h.tid,
        "device": lambda h: -1,
        "parent": lambda h: h.parent,
        "layer": lambda h: intern(h.layer),
        "phase": lambda h: PHASE[h.phase],
        "flops": lambda h: h.flops,
        "bytes": lambda h: 0.0,
        "shapes": lambda h: intern(h.shapes),
    }
    device_values = {  # d: (kind, name, start, dur, device, stream, correlation, bytes), o: its launcher
        "kind": lambda d, o: d[0],
        "name": lambda d, o: intern(d[1]),
        "start": lambda d, o: seconds(d[2]),
        "dur": lambda d, o: d[3] / 1e6,
        "pid": lambda d, o: o.pid if o else main_pid,
        "tid": lambda d, o: d[5],
        "device": lambda d, o: d[4],
        "layer": lambda d, o: intern(o.layer) if o else -1,
        "phase": lambda d, o: PHASE[o.phase] if o else other,
        "flops": lambda d, o: 0.0,
        "bytes": lambda d, o: d[7],
        "shapes": lambda d, o: -1,
    }
    events = {}
    for key, dtype in EVENT_COLUMNS.items():
        on_host = np.fromiter(map(host_values[key], hosts), dtype=dtype, count=len(hosts))
        if key == "parent":
            on_device = np.asarray(calls, dtype=dtype)
        else:
            on_device = np.fromiter(map(device_values[key], devices, owners), dtype=dtype, count=len(devices))
        events[key] = np.concatenate([on_host, on_device])
    mem = {
        "time": [seconds(m[0]) for m in memory],
        "delta": [m[3] for m in memory],
        "total": [m[4] for m in memory],
        "device": [m[5] for m in memory],
        "event": memory_event,
    }
    return Trace(
        names=list(names),
        events=events,
        memory={k: np.asarray(v, dtype=MEMORY_COLUMNS[k]) for k, v in mem.items()},
        steps=sorted((seconds(a), seconds(b)) for a, b in steps),
    )
