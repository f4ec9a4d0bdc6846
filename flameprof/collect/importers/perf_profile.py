"""``perf script`` output as a Profile: one sample per kept event, on a thread per (pid, tid), its
frames native code or, for Python 3.12+'s perf trampolines, Python (the parsing is perf_script's,
shared with ``collapse perf``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ...model.builder import ProfileBuilder
from ...model.profile import Profile
from ...model.records import Frame, ProcessInfo
from . import perf_lines
from .perf_script import CollapseOptions, LineFrames, PerfScriptParser, perf_number
from .skipped import note_skipped

_TIME = re.compile(rb"\s(\d+\.\d+):")
_CLOCK_EVENTS = (b"cpu-clock", b"task-clock")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def perf_frame(func: bytes, mod: bytes, raw: bytes) -> Frame:
    """A perf frame as a model Frame: Python 3.12+ perf-trampoline symbols ``py::qualname:file`` become
    Python frames; everything else is native code, with its module (DSO) as the file."""
    if raw.startswith(b"py::"):
        name, _, file = _decode(raw[4:]).partition(":")
        return Frame(name, file, 0, "python")
    file = "" if mod in (b"[unknown]", b"inlined") else _decode(mod)
    return Frame(_decode(func), file, 0, "native")


def read_perf_script(
    chunks: Iterable[bytes], source: str = "<stdin>", strict: bool = False, srcline: bool = False
) -> Profile:
    """Import perf script output: one sample per kept event, on a thread per (pid, tid), weighted by the
    sample period (seconds for cpu-clock/task-clock, event counts otherwise, 1 when perf printed none).
    With ``srcline`` (``perf script -F+srcline``) native frames are named ``func:file:line`` as
    ``stackcollapse-perf.pl --srcline`` names them."""
    builder = ProfileBuilder({"source": source, "collector": "perf"})
    frame_ids: dict[tuple[bytes, bytes, bytes], int] = {}

    def piece(parsed: LineFrames) -> tuple[int, ...]:
        ids = []
        for key in parsed:
            fid = frame_ids.get(key)
            if fid is None:
                fid = frame_ids[key] = builder.frame(perf_frame(*key))
            ids.append(fid)
        return tuple(ids)

    parser = PerfScriptParser(
        piece,
        lambda parent, ids: builder.stack_id(ids, parent),
        -1,
        CollapseOptions(srcline=srcline),
        strict,
        source,
        flush_at_end=True,
    )
    threads: dict[bytes, int] = {}
    samples: list[tuple[float, int, int, int]] = []
    for header, _pname, period, stack in parser.samples(chunks):
        m = perf_lines.header(header)
        assert m is not None  # the parser yields only samples whose header matched
        comm, first, second = m.comm, m.pid, m.tid
        key = comm + b"\0" + first + b"\0" + (second or b"")
        thread = threads.get(key)
        if thread is None:
            pid = perf_number(first) if second is not None else 0
            tid = perf_number(second if second is not None else first)
            thread = threads[key] = builder.thread_id(pid, tid, _decode(comm))
            if pid:
                builder.process(
                    ProcessInfo(pid, "main" if not builder.processes else "", cmdline=_decode(comm))
                )
        t = _TIME.search(header, m.pid_end)
        samples.append((float(t.group(1)) if t else 0.0, thread, stack, period))
    note_skipped(
        builder.meta,
        source,
        parser.skipped,
        f"line {parser.first_bad}",
        "unrecognized perf script line",
        found=bool(samples),
    )
    parser.report()
    event = parser.event_filter.split(b":")[0]
    has_period = any(s[3] != 1 for s in samples)
    if event in _CLOCK_EVENTS and has_period:
        scale, unit = 1e-9, "seconds"  # clock events count nanoseconds
    else:
        scale, unit = 1.0, (_decode(event) if has_period else "count")
    t0 = min((s[0] for s in samples), default=0.0)
    for time, thread, stack, period in samples:
        builder.add_sample(time - t0, thread, stack, period * scale, period * scale)
    builder.meta.update(weight_unit=unit, event=_decode(parser.event_filter), time_origin=t0)
    if samples:
        builder.meta["duration"] = max(s[0] for s in samples) - t0
    return builder.build()
