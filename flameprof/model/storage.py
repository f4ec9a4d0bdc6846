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
  trace.json, trace_events_<column>.npy, trace_memory_<column>.npy
                   only when a traced window ran (model/trace.py has the columns)
Writes go to a temporary file renamed into place, so a reader never sees half a profile.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from ..atomic import write_bytes
from ..errors import FlameprofError
from .fileformat import FORMAT, VERSION, frame_row, json_text, mark_row, pack, process_row, thread_row
from .profile import Frame, Mark, ProcessInfo, Profile, ThreadInfo
from .trace import EVENT_COLUMNS, MEMORY_COLUMNS, Trace

_US = 1e6


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _us(seconds: np.ndarray) -> np.ndarray:
    return np.rint(seconds * _US).astype(np.int64)


def dumps(profile: Profile) -> bytes:
    """Serialise ``profile`` to the bytes of a ``.flameprof`` file."""
    meta = dict(profile.meta, format=FORMAT, version=VERSION)
    tables = {
        "meta.json": meta,
        "frames.json": [frame_row(f) for f in profile.frames],
        "threads.json": [thread_row(t) for t in profile.threads],
        "processes.json": [process_row(p) for p in profile.processes],
        "marks.json": [mark_row(m) for m in profile.marks],
        "counters.json": {k: [t.tolist(), v.tolist()] for k, (t, v) in profile.counters.items()},
    }
    columns = {
        "stack_parent": profile.stack_parent.astype(np.int32),
        "stack_frame": profile.stack_frame.astype(np.int32),
        "sample_time": _us(profile.sample_time),
        "sample_thread": profile.sample_thread.astype(np.int32),
        "sample_stack": profile.sample_stack.astype(np.int32),
        "sample_wall": _us(profile.sample_wall),
        "sample_cpu": _us(profile.sample_cpu),
    }
    if profile.trace is not None:
        trace = profile.trace
        tables["trace.json"] = {"names": trace.names, "steps": trace.steps, "params": trace.params}
        columns.update({f"trace_events_{k}": v for k, v in trace.events.items()})
        columns.update({f"trace_memory_{k}": v for k, v in trace.memory.items()})
    return pack(
        {name: json_text(table) for name, table in tables.items()},
        {name: _npy(column) for name, column in columns.items()},
    )


def save(profile: Profile, path: str | os.PathLike) -> None:
    """Write ``profile`` atomically, so a reader never sees half a profile."""
    write_bytes(os.fspath(path), dumps(profile))


def is_flameprof_file(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like a ``.flameprof`` zip."""
    return head.startswith(b"PK\x03\x04")


def loads(data: bytes, source: str = "<bytes>") -> Profile:
    """Parse the bytes of a ``.flameprof`` file; any defect raises FlameprofError naming ``source``."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:

            def table(name: str):
                return json.loads(zf.read(name).decode("utf-8"))

            def column(name: str) -> np.ndarray:
                return np.load(io.BytesIO(zf.read(name + ".npy")), allow_pickle=False)

            meta = table("meta.json")
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise FlameprofError(f"{source}: not a flameprof profile")
            if int(meta.get("version", 0)) > VERSION:
                raise FlameprofError(
                    f"{source}: profile format version {meta.get('version')} is newer than "
                    f"this flameprof reads ({VERSION}); upgrade flameprof"
                )
            counters = {
                k: (np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64))
                for k, (t, v) in table("counters.json").items()
            }
            profile = Profile(
                frames=[Frame(str(n), str(f), int(line), str(k)) for n, f, line, k in table("frames.json")],
                stack_parent=column("stack_parent"),
                stack_frame=column("stack_frame"),
                threads=[ThreadInfo(int(p), int(t), str(n)) for p, t, n in table("threads.json")],
                processes=[
                    ProcessInfo(int(p), str(r), str(h), str(c), int(pp))
                    for p, r, h, c, pp in table("processes.json")
                ],
                sample_time=column("sample_time") / _US,
                sample_thread=column("sample_thread"),
                sample_stack=column("sample_stack"),
                sample_wall=column("sample_wall") / _US,
                sample_cpu=column("sample_cpu") / _US,
                marks=[Mark(float(t), int(th), str(n), str(v)) for t, th, n, v in table("marks.json")],
                counters=counters,
                meta=meta,
                trace=_trace(zf, table, column),
            )
            profile.validate()
            return profile
    except FlameprofError:
        raise
    except (
        zipfile.BadZipFile,
        KeyError,
        ValueError,
        TypeError,
        OSError,
        EOFError,
        UnicodeDecodeError,
    ) as exc:
        raise FlameprofError(f"{source}: corrupt or truncated flameprof file ({exc})") from None


def _trace(zf: zipfile.ZipFile, table, column) -> Trace | None:
    """The traced window's members, when the file has them."""
    if "trace.json" not in zf.namelist():
        return None
    head = table("trace.json")
    return Trace(
        names=[str(n) for n in head["names"]],
        events={k: column(f"trace_events_{k}") for k in EVENT_COLUMNS},
        memory={k: column(f"trace_memory_{k}") for k in MEMORY_COLUMNS},
        steps=[(float(a), float(b)) for a, b in head["steps"]],
        params={str(k): (int(c), int(b)) for k, (c, b) in head["params"].items()},
    )


def load(path: str | os.PathLike) -> Profile:
    """Read a ``.flameprof`` file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    return loads(data, path)
