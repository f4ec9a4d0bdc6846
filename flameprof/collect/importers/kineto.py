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
  a host call that waits for the device (``cudaDeviceSynchronize``, ...) ``sync``;
* a device event goes, through its correlation id, to the runtime call that launched it, and so to
  the op around that call, its layer and its phase.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass

import numpy as np

from ...errors import FlameprofError
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
    TRACE_PHASES,
    Trace,
)
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
    )
)
PHASE = {name: i for i, name in enumerate(TRACE_PHASES)}
_NEST_SLACK = 1e-3  # microseconds: Kineto rounds times to nanoseconds, children may overhang by that


def declared_phase(kind: int, name: str) -> str | None:
    """The phase an event sets for itself and its children, or None when it inherits its parent's."""
    if kind == ANNOTATION:
        if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            return "optimizer"
        if name.startswith("enumerate(DataLoader)#"):
            return "data"
    elif kind == OP and name.startswith("autograd::engine::evaluate_function:"):
        return "backward"
    elif kind == RUNTIME and name in SYNC_CALLS:
        return "sync"
    return None


@dataclass
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


def _int(value: object, default: int = -1) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if abs(value) < 1 << 62 else default
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 19:
        return int(value)
    return default


def decode_document(data: bytes, source: str) -> dict:
    """The trace's JSON object (gzip-compressed or not), or one error line saying where it broke."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise FlameprofError(f"{source}: corrupt or truncated gzip data ({exc})") from None
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise FlameprofError(
            f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise FlameprofError(f"{source}: not a readable trace ({type(exc).__name__})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise FlameprofError(f"{source}: not a Chrome trace (no traceEvents list)")
    return doc


def is_kineto_document(doc: dict) -> bool:
    """True for a trace torch.profiler wrote (its schema or an op/kernel event), not any Chrome trace."""
    if "schemaVersion" in doc or "deviceProperties" in doc or "baseTimeNanoseconds" in doc:
        return True
    return any(
        isinstance(e, dict) and str(e.get("cat", "")).lower() in ("cpu_op", "kernel")
        for e in doc["traceEvents"][:10000]
    )


def read_trace(doc: dict, source: str, epoch: float | None = None) -> tuple[Trace, float]:
    """The attributed Trace of a decoded Kineto document, with times relative to ``epoch`` (seconds
    since the Unix epoch; the trace's first event when None). Returns the trace and the epoch used."""
    hosts: list[_Host] = []
    devices: list[tuple] = []  # (kind, name, start, dur, device, stream, correlation, bytes)
    memory: list[tuple] = []  # (ts, pid, tid, delta, total, device)
    steps: list[tuple[float, float]] = []
    base_ns = _number(doc.get("baseTimeNanoseconds", 0), "baseTimeNanoseconds", source, 1e20)
    for index, event in enumerate(doc["traceEvents"]):
        if not isinstance(event, dict):
            raise FlameprofError(f"{source}: trace event {index} is not an object")
        phase_char = event.get("ph")
        if phase_char == "X":
            _read_complete(event, index, source, hosts, devices, steps)
        elif phase_char == "i" and event.get("name") == "[memory]":
            where = f"{source}: trace event {index}"
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
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
    starts = [h.start for h in hosts] + [d[2] for d in devices] + [m[0] for m in memory]
    if not starts:
        raise FlameprofError(f"{source}: the trace holds no op, kernel or memory event")
    first = min(starts)
    first_epoch = (first * 1e3 + base_ns) / 1e9
    epoch = first_epoch if epoch is None else epoch
    shift = first_epoch - epoch

    def seconds(us: float) -> float:
        return (us - first) / 1e6 + shift

    order, memory_event = _nest(hosts, memory)
    _attribute(hosts, order)
    device_parent = _launchers(hosts, devices)
    return _columns(hosts, devices, device_parent, memory, memory_event, steps, seconds), epoch


def _read_complete(event: dict, index: int, source: str, hosts: list, devices: list, steps: list) -> None:
    category = str(event.get("cat", "")).lower()
    kind = HOST_CATEGORIES.get(category, DEVICE_CATEGORIES.get(category))
    if kind is None:
        return
    name = event.get("name")
    name = name if isinstance(name, str) else str(name)
    if category == "python_function" and not name.startswith(MODULE_PREFIX):
        return  # Python frames of with_stack: the samples show the Python side
    where = f"{source}: trace event {index} ({name[:60]!r})"
    start = _number(event.get("ts"), "ts", where)
    dur = _number(event.get("dur", 0), "dur", where)
    if dur < 0:
        raise FlameprofError(f"{where}: negative duration")
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
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
                _number(size, "bytes", where) if size not in (None, "") else 0.0,
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
            shapes=json.dumps(dims, separators=(",", ":")) if kind == OP and dims else "",
        )
    )


def _nest(hosts: list[_Host], memory: list[tuple]) -> tuple[list[int], list[int]]:
    """Set each host event's parent (the innermost event enclosing it on its thread), and find the
    host event each memory event happened in. Returns the host events parents first, and the latter."""
    keys = [(h.pid, h.tid, h.start, 0, -h.dur, i) for i, h in enumerate(hosts)]
    keys += [(m[1], m[2], m[0], 1, 0.0, i) for i, m in enumerate(memory)]
    keys.sort()
    memory_event = [NO_PARENT] * len(memory)
    stack: list[int] = []
    thread = None
    for pid, tid, start, is_memory, _, i in keys:
        if (pid, tid) != thread:
            thread, stack = (pid, tid), []
        if is_memory:
            while stack and hosts[stack[-1]].start + hosts[stack[-1]].dur < start:
                stack.pop()
            memory_event[i] = stack[-1] if stack else NO_PARENT
            continue
        end = start + hosts[i].dur
        while stack and hosts[stack[-1]].start + hosts[stack[-1]].dur + _NEST_SLACK < end:
            stack.pop()
        hosts[i].parent = stack[-1] if stack else NO_PARENT
        stack.append(i)
    order = sorted(range(len(hosts)), key=lambda i: (hosts[i].start, -hosts[i].dur, i))
    return order, memory_event


def _attribute(hosts: list[_Host], order: list[int]) -> None:
    """Layer and phase of every host event, in time order so forward ops precede their backward."""
    forward_layer: dict[tuple[int, int], str] = {}  # (pid, sequence number) -> forward layer
    for i in order:
        host = hosts[i]
        parent = hosts[host.parent] if host.parent >= 0 else None
        layer = parent.layer if parent else ""
        phase = parent.phase if parent else "other"
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


def _launchers(hosts: list[_Host], devices: list[tuple]) -> list[int]:
    """For each device event, the host op that launched it (the op around the runtime call with the
    same correlation id), or the runtime call itself when no op encloses it."""
    runtime: dict[int, int] = {}
    for i, host in enumerate(hosts):
        if host.kind == RUNTIME and host.correlation >= 0:
            runtime[host.correlation] = i
    out = []
    for device in devices:
        call = runtime.get(device[6], NO_PARENT)
        launcher = call
        while launcher >= 0 and hosts[launcher].kind != OP:
            launcher = hosts[launcher].parent
        out.append(launcher if launcher >= 0 else call)
    return out


def _columns(hosts, devices, device_parent, memory, memory_event, steps, seconds) -> Trace:
    names: dict[str, int] = {}

    def intern(text: str) -> int:
        return names.setdefault(text, len(names)) if text else -1

    rows = {name: [] for name in EVENT_COLUMNS}
    for host in hosts:
        for key, value in (
            ("kind", host.kind),
            ("name", intern(host.name)),
            ("start", seconds(host.start)),
            ("dur", host.dur / 1e6),
            ("pid", host.pid),
            ("tid", host.tid),
            ("device", -1),
            ("parent", host.parent),
            ("layer", intern(host.layer)),
            ("phase", PHASE[host.phase]),
            ("flops", host.flops),
            ("bytes", 0.0),
            ("shapes", intern(host.shapes)),
        ):
            rows[key].append(value)
    for (kind, name, start, dur, device, stream, _, size), parent in zip(devices, device_parent):
        owner = hosts[parent] if parent >= 0 else None
        for key, value in (
            ("kind", kind),
            ("name", intern(name)),
            ("start", seconds(start)),
            ("dur", dur / 1e6),
            ("pid", owner.pid if owner else 0),
            ("tid", stream),
            ("device", device),
            ("parent", parent),
            ("layer", intern(owner.layer) if owner else -1),
            ("phase", PHASE[owner.phase] if owner else PHASE["other"]),
            ("flops", 0.0),
            ("bytes", size),
            ("shapes", -1),
        ):
            rows[key].append(value)
    mem = {
        "time": [seconds(m[0]) for m in memory],
        "delta": [m[3] for m in memory],
        "total": [m[4] for m in memory],
        "device": [m[5] for m in memory],
        "event": memory_event,
    }
    trace = Trace(
        names=list(names),
        events={k: np.asarray(v, dtype=EVENT_COLUMNS[k]) for k, v in rows.items()},
        memory={k: np.asarray(v, dtype=MEMORY_COLUMNS[k]) for k, v in mem.items()},
        steps=sorted((seconds(a), seconds(b)) for a, b in steps),
    )
    return trace
