"""The ``.flameprof`` file: a zip of JSON tables and ``.npy`` columns, loadable without pickle.

Layout (format version 1, documented in docs/file-format.md):
  meta.json        {"format": "flameprof", "version": 1, ...run metadata}
  frames.json      [[name, file, line, kind], ...]
  threads.json     [[pid, tid, name], ...]
  processes.json   [[pid, role, host, cmdline, ppid], ...]
  marks.json       [[time, thread, name, value], ...]
  counters.json    {name: [[time...], [value...]]}
  stack_parent.npy int32, stack_frame.npy int32
  sample_time.npy  int64 microseconds since meta.start_time
  sample_thread.npy int32, sample_stack.npy int32
  sample_wall.npy, sample_cpu.npy  int64 microseconds
  sample_gil.npy   uint8: each sample's thread's part of the GIL (records.GIL_*); a file written
                   before it has none, and its samples' states are unknown
  trace.json, trace_events_<column>.npy, trace_memory_<column>.npy
                   only when a traced window ran (model/trace.py has the columns; a file written
                   before ``trace_events_types`` has none, and its ops' dtypes are unknown)
Writes go to a temporary file renamed into place, so a reader never sees half a profile.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..atomic import atomic_file
from ..errors import FlameprofError
from . import validate
from .fileformat import (
    FORMAT,
    VERSION,
    frame_row,
    json_text,
    mark_row,
    open_zip,
    pack,
    process_row,
    thread_row,
    write_member,
)
from .npy import read_column
from .phase_names import PHASES, TRACE_PHASES_BEFORE_SHARED
from .profile import Frame, Mark, ProcessInfo, Profile, ThreadInfo
from .safezip import read_members
from .trace import EVENT_COLUMNS, MEMORY_COLUMNS, Trace

_US = 1e6
_TIMES = ("sample_time", "sample_wall", "sample_cpu")  # integer microseconds in the file


_CHUNK = 1 << 22  # bytes of a column written at a time


def _npy_header(dtype: np.dtype, rows: int) -> bytes:
    head = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (rows,)}
    np.lib.format.write_array_header_1_0(head, header)
    return head.getvalue()


def _npy(*parts: np.ndarray) -> Iterator[bytes | memoryview]:
    """A column's ``.npy`` bytes, as ``np.save`` writes them, in chunks: the header, then the column's
    own memory a slice at a time (no copy of a column of millions is made to write it). The column
    may come in ``parts`` of one type, one after the other (never joined)."""
    yield _npy_header(parts[0].dtype, sum(len(part) for part in parts))
    for part in parts:
        data = np.ascontiguousarray(part).data.cast("B")
        for at in range(0, len(data), _CHUNK):
            yield data[at : at + _CHUNK]


def _npy_us(seconds: np.ndarray) -> Iterator[bytes | memoryview]:
    """A column of seconds as the ``.npy`` bytes of its int64 microseconds, converted a slice at a
    time as it is written (converted whole, each of the three time columns of 4 M samples took two
    temporaries of 32 MB at the top of an import's memory). Its range is checked whole, before
    anything is written (``check_storable``)."""
    yield _npy_header(np.dtype(np.int64), len(seconds))
    rows = _CHUNK // 8
    for at in range(0, len(seconds), rows):
        yield np.rint(seconds[at : at + rows] * _US).astype(np.int64).data.cast("B")


_MAX_STORED = 2.0**63 / _US  # seconds (or counts) that int64 microseconds hold


def _check_us(seconds: np.ndarray) -> None:
    if len(seconds) and not max(-float(seconds.min()), float(seconds.max())) < _MAX_STORED:
        raise ValueError(f"times or weights over {_MAX_STORED:.3g} cannot be stored in a .flameprof file")


def check_storable(profile: Profile) -> None:
    """Raise ValueError, as ``dumps`` would, when a time or a weight is past what the file stores: for
    a command that must refuse before writing anything else."""
    for name in _TIMES:
        _check_us(getattr(profile, name))


def trace_table(
    names: list[str],
    steps: list[tuple[float, float]],
    params: dict[str, tuple[int, int]],
    devices: dict[int, tuple[str, int, int]],
) -> str:
    """``trace.json``: the traced window's names and what it has besides its columns."""
    return json_text(
        {
            "names": names,
            "steps": steps,
            "params": params,
            "phases": list(PHASES),
            "devices": [[i, *device] for i, device in sorted(devices.items())],
        }
    )


def _contents(profile: Profile) -> tuple[dict[str, str], dict[str, Any]]:
    """The file's JSON tables as text, and a callable per ``.npy`` column making its bytes (made one
    at a time as they are written: a copy of every column at once would double the memory)."""
    meta = dict(profile.meta, format=FORMAT, version=VERSION)
    tables = {
        "meta.json": meta,
        "frames.json": [frame_row(f) for f in profile.frames],
        "threads.json": [thread_row(t) for t in profile.threads],
        "processes.json": [process_row(p) for p in profile.processes],
        "marks.json": [mark_row(m) for m in profile.marks],
        "counters.json": {k: [t.tolist(), v.tolist()] for k, (t, v) in profile.counters.items()},
    }
    texts = {name: json_text(table) for name, table in tables.items()}
    check_storable(profile)  # before anything is written; each column converted as it is written
    columns: dict[str, Any] = {
        "stack_parent": lambda: _npy(profile.stack_parent.astype(np.int32, copy=False)),
        "stack_frame": lambda: _npy(profile.stack_frame.astype(np.int32, copy=False)),
        "sample_time": lambda: _npy_us(profile.sample_time),
        "sample_thread": lambda: _npy(profile.sample_thread.astype(np.int32, copy=False)),
        "sample_stack": lambda: _npy(profile.sample_stack.astype(np.int32, copy=False)),
        "sample_wall": lambda: _npy_us(profile.sample_wall),
        "sample_cpu": lambda: _npy_us(profile.sample_cpu),
        "sample_gil": lambda: _npy(profile.sample_gil.astype(np.uint8, copy=False)),
    }
    if profile.trace is not None:
        trace = profile.trace
        texts["trace.json"] = trace_table(trace.names, trace.steps, trace.params, trace.devices)
        columns.update({f"trace_events_{k}": (lambda v=v: _npy(v)) for k, v in trace.events.items()})
        columns.update({f"trace_memory_{k}": (lambda v=v: _npy(v)) for k, v in trace.memory.items()})
    return texts, columns


def dumps(profile: Profile) -> bytes:
    """Serialise ``profile`` to the bytes of a ``.flameprof`` file; ValueError when a time or a weight
    is past what the file stores."""
    tables, columns = _contents(profile)
    return pack(tables, {name: b"".join(column()) for name, column in columns.items()})


class ProfileWriter:
    """A ``.flameprof`` file being written a member at a time (``writing``): an import writes a trace's
    columns as it makes them, and drops them, before the samples made from the trace exist, so the
    whole profile is never held at once."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self._zf = zf

    def column(self, name: str, *parts: np.ndarray) -> None:
        """The ``.npy`` member ``name`` (one of the trace's ``trace_events_*``/``trace_memory_*``): its
        values in ``parts`` of one type, one after the other."""
        write_member(self._zf, name + ".npy", _npy(*parts))

    def table(self, name: str, text: str) -> None:
        """A JSON member (``trace.json``: ``trace_table``)."""
        self._zf.writestr(name, text)

    def profile(self, profile: Profile) -> None:
        """Every member of ``profile`` (ValueError, before any is written, when a time or a weight is
        past what the file stores)."""
        tables, columns = _contents(profile)
        for name, text in tables.items():
            self._zf.writestr(name, text)
        for name, column in columns.items():
            write_member(self._zf, name + ".npy", column())


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[ProfileWriter]:
    """A ``ProfileWriter`` on ``path``, renamed into place when the block ends without an error (a
    reader never sees half a profile)."""
    with atomic_file(os.fspath(path), "wb") as fh, open_zip(fh, compress=True) as zf:
        yield ProfileWriter(zf)


def save(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` atomically; each column is written as it is made. ValueError (no file left)
    when a time or a weight is past what the file stores."""
    with writing(path) as out:
        out.profile(profile)


def is_flameprof_file(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like a ``.flameprof`` zip."""
    return head.startswith(b"PK\x03\x04")


_TABLES = ("meta.json", "frames.json", "threads.json", "processes.json", "marks.json", "counters.json")
_COLUMNS: dict[str, type[np.integer[Any]]] = {
    "stack_parent": np.int32,
    "stack_frame": np.int32,
    "sample_time": np.int64,
    "sample_thread": np.int32,
    "sample_stack": np.int32,
    "sample_wall": np.int64,
    "sample_cpu": np.int64,
}


def loads(data: bytes, source: str = "<bytes>") -> Profile:
    """Parse the bytes of a ``.flameprof`` file, checked whole (``validate``) before it is returned; any
    defect raises FlameprofError naming ``source``, within time and memory linear in ``len(data)``."""
    try:
        members = read_members(data, _TABLES + tuple(name + ".npy" for name in _COLUMNS))
        tables = {name: _json(members[name], name) for name in _TABLES}
        meta = validate.meta(tables["meta.json"])
        if meta.get("format") != FORMAT:
            raise FlameprofError(f"{source}: not a flameprof profile")
        if meta.get("version", 0) > VERSION:
            raise FlameprofError(
                f"{source}: profile format version {meta.get('version')} is newer than "
                f"this flameprof reads ({VERSION}); upgrade flameprof"
            )
        columns = {name: read_column(members[name + ".npy"], name, t) for name, t in _COLUMNS.items()}
        profile = Profile(
            frames=[Frame(*row) for row in validate.rows(tables["frames.json"], "frames.json", "ssis")],
            threads=[
                ThreadInfo(*row) for row in validate.rows(tables["threads.json"], "threads.json", "iis")
            ],
            processes=[
                ProcessInfo(*row)
                for row in validate.rows(tables["processes.json"], "processes.json", "isssi")
            ],
            marks=[
                Mark(float(t), *rest)
                for t, *rest in validate.rows(tables["marks.json"], "marks.json", "niss")
            ],
            counters={
                k: (np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64))
                for k, (t, v) in validate.counters(tables["counters.json"]).items()
            },
            meta=meta,
            trace=_trace(data),
            sample_gil=_gil_states(data),
            **{name: columns[name] / _US if name in _TIMES else columns[name] for name in _COLUMNS},
        )
        validate.check_profile(profile)
        return profile
    except ValueError as exc:
        raise FlameprofError(f"{source}: corrupt or truncated flameprof file ({exc})") from None


def _gil_states(data: bytes) -> np.ndarray:
    """The samples' GIL states; none (every one unknown: ``Profile``) in a file written before them."""
    members = read_members(data, ("sample_gil.npy",), optional=True)
    if not members:
        return np.zeros(0, np.uint8)
    return read_column(members["sample_gil.npy"], "sample_gil", np.uint8)


_LATER_COLUMNS = ("trace_events_types",)  # a file written before them has none: every value is -1
_TRACE_COLUMNS: dict[str, type[np.integer[Any]] | type[np.float64]] = {
    **{f"trace_events_{k}": t for k, t in EVENT_COLUMNS.items()},
    **{f"trace_memory_{k}": t for k, t in MEMORY_COLUMNS.items()},
}


def _trace(data: bytes) -> Trace | None:
    """The traced window's members, when the file has them (``validate.check_profile`` checks them)."""
    required = [n for n in _TRACE_COLUMNS if n not in _LATER_COLUMNS]
    members = read_members(data, ("trace.json", *(n + ".npy" for n in required)), optional=True)
    if not members:
        return None
    for name in _LATER_COLUMNS:
        members.update(read_members(data, (name + ".npy",), optional=True))
    head = _json(members["trace.json"], "trace.json")
    if not isinstance(head, dict):
        raise ValueError("trace.json is not an object")
    names = head.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("trace.json: names must be a list of strings")
    steps = validate.rows(head.get("steps"), "trace.json steps", "nn")
    params = head.get("params")
    if not isinstance(params, dict) or not all(
        isinstance(v, list) and len(v) == 2 and all(validate.is_int(x) for x in v) for v in params.values()
    ):
        raise ValueError("trace.json: params must map layers to [count, bytes]")
    devices = validate.rows(head.get("devices", []), "trace.json devices", "isii")
    columns = {
        n: read_column(members[n + ".npy"], n, t) for n, t in _TRACE_COLUMNS.items() if n + ".npy" in members
    }
    for name in _LATER_COLUMNS:
        columns.setdefault(name, np.full(len(columns["trace_events_kind"]), -1, _TRACE_COLUMNS[name]))
    columns["trace_events_phase"] = _shared_phases(columns["trace_events_phase"], head.get("phases"))
    return Trace(
        names=names,
        events={k: columns[f"trace_events_{k}"] for k in EVENT_COLUMNS},
        memory={k: columns[f"trace_memory_{k}"] for k in MEMORY_COLUMNS},
        steps=[(float(a), float(b)) for a, b in steps],
        params={k: (int(c), int(b)) for k, (c, b) in params.items()},
        devices={int(i): (str(name), int(major), int(minor)) for i, name, major, minor in devices},
    )


def _shared_phases(phase: np.ndarray, written: object) -> np.ndarray:
    """The events' phase column as indexes into ``PHASES``, from the file's own vocabulary: the
    ``phases`` it lists, or, in a file written before it listed them, the trace's old one."""
    if written is None:
        written = TRACE_PHASES_BEFORE_SHARED
    if not isinstance(written, list | tuple) or not all(isinstance(p, str) for p in written):
        raise ValueError("trace.json: phases must be a list of names")
    if tuple(written) == PHASES:
        return phase
    if len(phase) and (phase.min() < 0 or phase.max() >= len(written)):
        raise ValueError("trace event phase out of range")
    # a phase this version does not know counts as other
    shared = np.array([PHASES.index(p) if p in PHASES else PHASES.index("other") for p in written], np.int8)
    mapped: np.ndarray = shared[phase]
    return mapped


def _json(data: bytes, name: str) -> object:
    """A JSON member; nesting past the interpreter's recursion limit is a defect, not a crash."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{name} is nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
        raise ValueError(f"{name}: {exc}") from None


def load(path: str | os.PathLike[str]) -> Profile:
    """Read a ``.flameprof`` file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    return loads(data, path)
