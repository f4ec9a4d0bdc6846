"""The events of a Kineto trace that the reader keeps, as columns of rows: each op, annotation,
runtime call, kernel, copy, fill and allocator event, with only the fields attribution reads.

The C ``Scanner`` (native/kineto.c) reads the ``traceEvents`` array straight from the file's bytes
into these columns; an element it leaves to Python (an unusual field, a defect, or no C extension
at all) is decoded by json_stream and read here by ``_row``, with the same rules, and its row is put
back in its place among the Scanner's. Names and the ``Input Dims``/``Concrete Inputs``/``Input type``
values are ids into ``names`` and ``values``, each distinct one decoded once.

Row columns, by kind: a host event's ``a``/``b``/``c``/``d`` are its pid, tid, sequence number and
correlation id (``dims``/``concrete``/``types`` its inputs); a device event's are its device, stream,
-1 and correlation id (``x`` its bytes); a memory event's (kind ``MEMORY``, ``dur`` its total allocated) are
its pid, tid and device (``x`` its bytes allocated).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ...errors import FlameprofError
from ...model.trace import ANNOTATION, KERNEL, MEMCPY, MEMSET, OP, RUNTIME

MODULE_PREFIX = "nn.Module: "
MEMORY, PYTHON = 6, 7  # row kinds past the trace's: an allocator event, a python_function event
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
ROW_CATEGORIES = {**HOST_CATEGORIES, "python_function": PYTHON, **DEVICE_CATEGORIES}
ROW_COLUMNS: dict[str, Any] = {
    "kind": np.int8,
    "name": np.int32,
    "ts": np.float64,
    "dur": np.float64,
    "a": np.int32,  # pids and tids, devices and streams: wrapped to 32 bits, as the trace keeps them
    "b": np.int32,
    "c": np.int64,
    "d": np.int64,
    "x": np.float64,
    "dims": np.int32,
    "concrete": np.int32,
    "types": np.int32,
}


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


class _PythonRows:
    """The rows of the elements Python reads, each with the Scanner's row count before it."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.at: list[int] = []
        self.names: dict[str, int] = {}
        self.values: list[object] = []

    def name_id(self, name: str) -> int:
        return -2 - self.names.setdefault(name, len(self.names))  # -2, -3, ...: remapped at the end

    def value_id(self, args: dict, key: str) -> int:
        if key not in args:
            return -1
        self.values.append(args[key])
        return -1 - len(self.values)

    def add(self, event: object, index: int, source: str, at: int) -> None:
        if not isinstance(event, dict):
            raise FlameprofError(f"{source}: trace event {index} is not an object")
        phase_char = event.get("ph")
        if phase_char == "X":
            row = self._complete(event, index, source)
        elif phase_char == "i" and event.get("name") == "[memory]":
            where = f"{source}: trace event {index}"
            args = event.get("args")
            if not isinstance(args, dict):
                args = {}
            device = -1 if _int(args.get("Device Type"), 0) == 0 else _int(args.get("Device Id"), 0)
            ts = _number(event.get("ts"), "ts", where)
            pid, tid = _int(event.get("pid")), _int(event.get("tid"))
            delta = _number(args.get("Bytes", 0), "Bytes", where)
            total = _number(args.get("Total Allocated", 0), "Total Allocated", where)
            row = (MEMORY, -1, ts, total, pid, tid, device, 0, delta, -1, -1, -1)
        else:
            return
        if row is not None:
            self.rows.append(row)
            self.at.append(at)

    def _complete(self, event: dict, index: int, source: str) -> tuple | None:
        """The row of a complete event; a python_function one is dropped by its name later, with the
        Scanner's (only ``nn.Module`` ones are kept)."""
        category = str(event.get("cat", "")).lower()
        kind = ROW_CATEGORIES.get(category)
        if kind is None:
            return None
        name = event.get("name")
        name = name if isinstance(name, str) else str(name)
        start: Any = event.get("ts")  # a JSON value: checked next
        dur: Any = event.get("dur", 0)
        if type(start) in _PLAIN and type(dur) in _PLAIN and -1e18 <= start <= 1e18 and 0 <= dur <= 1e18:
            start, dur = float(start), float(dur)  # the common case, without building a message
        else:
            if kind == PYTHON and not name.startswith(MODULE_PREFIX):
                return None  # never read: its times do not matter
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
            return (
                kind,
                self.name_id(name),
                start,
                dur,
                _int(args.get("device"), _int(event.get("pid"), 0)),
                _int(args.get("stream"), _int(event.get("tid"), 0)),
                -1,
                _int(args.get("correlation")),
                _number(size, "bytes", f"{source}: trace event {index} ({name[:60]!r})")
                if size not in (None, "")
                else 0.0,
                -1,
                -1,
                -1,
            )
        return (
            kind,
            self.name_id(name),
            start,
            dur,
            _int(event.get("pid"), 0),
            _int(event.get("tid"), 0),
            _int(args.get("Sequence number")),
            _int(args.get("correlation", args.get("External id") if kind == RUNTIME else None)),
            0.0,
            self.value_id(args, "Input Dims"),
            self.value_id(args, "Concrete Inputs"),
            self.value_id(args, "Input type"),
        )


@dataclass
class Rows:
    """The rows read: ``take`` each column once (the Scanner's copy is dropped as it is taken, so no
    more than one column is ever held twice)."""

    scan: Any  # the Scanner, or None
    python: _PythonRows
    names: list[str]  # name id -> text (a text may repeat)
    values: list[object]  # dims/concrete/types id -> value
    scanned: tuple[int, int]  # how many names and values the Scanner interned

    def take(self, key: str) -> np.ndarray:
        index, dtype = list(ROW_COLUMNS).index(key), ROW_COLUMNS[key]
        if self.scan is not None:
            column = np.frombuffer(self.scan.take(index), dtype=dtype)
        else:
            column = np.zeros(0, dtype=dtype)
        if not self.python.rows:
            return column
        extra = np.asarray([row[index] for row in self.python.rows]).astype(dtype)  # ints past 32 bits wrap
        if key in ("name", "dims", "concrete", "types"):  # -2, -3, ...: Python's own, after the Scanner's
            base = self.scanned[key != "name"]
            extra = np.where(extra <= -2, base - 2 - extra, extra).astype(dtype)
        return np.insert(column, np.asarray(self.python.at, dtype=np.int64), extra)


def scanner() -> Any:
    """The C Scanner of trace events, or None where the extension is not built."""
    try:
        from ..._kineto import Scanner
    except ImportError:
        return None
    return Scanner(ROW_CATEGORIES)


def _text(raw: bytes) -> str:
    return raw.decode() if b"\\" not in raw else json.loads(b'"' + raw + b'"')


def _value(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # what orjson refuses (integers past 64 bits, ...)
        return json.loads(raw)


def read_rows(events: Any, source: str, scan: Any) -> Rows:
    """The rows of the trace ``events`` yields: the elements ``scan`` (a Scanner, or None) left to
    Python. Raises FlameprofError on an event the reader refuses."""
    python = _PythonRows()
    read = 0  # elements read here
    for event in events:
        elements, rows = scan.counts() if scan is not None else (0, 0)
        python.add(event, elements + read, source, rows)
        read += 1
    raw_names, raw_values = scan.strings() if scan is not None else ([], [])
    names = [_text(raw) for raw in raw_names] + list(python.names)
    values = [_value(raw) for raw in raw_values] + python.values
    return Rows(scan, python, names, values, (len(raw_names), len(raw_values)))
