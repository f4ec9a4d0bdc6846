"""Read py-spy output: ``record --format raw`` and ``--format speedscope`` (any speedscope JSON).

py-spy's ``--subprocesses`` and ``--threads`` put synthetic root frames on every stack
(``process 123:"python train.py"`` for the process and each of its ancestors, then
``thread (456): MainThread``); these become the profile's processes and threads, not frames.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ...errors import FlameprofError
from ...model.builder import ProfileBuilder
from ...model.records import Frame, ProcessInfo
from .folded import FoldedLines, counts_to_seconds, file_kind, parse_frame
from .skipped import note_skipped

if TYPE_CHECKING:
    from ...model.profile import Profile

# py-spy's synthetic root frames. A command line is written as is, so it may hold ";" and newlines.
_PROCESS = re.compile(r'process (\d{1,10}):"(.*?)"(?:;|\Z)', re.S)
_THREAD = re.compile(r"thread \((0[xX][0-9a-fA-F]{1,16}|\d{1,20})\)(?:: ([^;]*))?(?:;|\Z)")
_PROFILE_THREAD = re.compile(r'Thread (0[xX][0-9a-fA-F]{1,16}|\d{1,20})(?: "(.*)")?')
_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6, "nanoseconds": 1e-9}


def _thread_id(text: str) -> int:
    return int(text, 16) if text[:2] in ("0x", "0X") else int(text)


def split_roots(stack: str) -> tuple[list[tuple], str]:
    """The leading root frames of a py-spy stack as ("process", pid, cmdline) and ("thread", tid,
    name) tuples, and the rest of the stack."""
    roots: list[tuple] = []
    pos = 0
    while True:
        m = _PROCESS.match(stack, pos)
        if m is None:
            break
        roots.append(("process", int(m.group(1)), m.group(2)))
        pos = m.end()
    m = _THREAD.match(stack, pos)
    if m is not None:
        roots.append(("thread", _thread_id(m.group(1)), m.group(2) or ""))
        pos = m.end()
    return roots, stack[pos:]


class _Threads:
    """Turns root frames into a thread index of ``builder``, registering their processes."""

    def __init__(self, builder: ProfileBuilder) -> None:
        self.builder = builder

    def thread(self, roots: list[tuple], default_tid: int = 0, default_name: str = "") -> int:
        pid, tid, name = 0, default_tid, default_name
        for kind, ident, text in roots:
            if kind == "process":
                self.builder.process(ProcessInfo(ident, "main" if not pid else "", cmdline=text, ppid=pid))
                pid = ident
            else:
                tid, name = ident, text
        return self.builder.thread_id(pid, tid, name)


_RECORD_START = re.compile(r'process \d{1,10}:"')


def _records(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(first line number, record) pairs: with process root frames, a line that does not start one
    continues the previous record (a command line with newlines in it)."""
    first = 0
    parts: list[str] = []  # the pending record's lines, joined once: linear in any number of them
    grouped: bool | None = None
    for number, line in enumerate(lines, 1):
        if grouped is None and line.strip() and not line.startswith("#"):
            grouped = bool(_RECORD_START.match(line))
        if grouped and parts and not _RECORD_START.match(line):
            parts[-1] = parts[-1].rstrip("\r\n")
            parts.append(line)
            continue
        if parts:
            yield first, "\n".join(parts)
        first, parts = number, [line]
    if parts:
        yield first, "\n".join(parts)


def read_pyspy_raw(
    lines: Iterable[str], source: str = "<stdin>", strict: bool = True, rate: float | None = None
) -> Profile:
    """Import ``py-spy record --format raw`` output. Counts are samples (``weight_unit`` ``count``)
    unless ``rate`` (py-spy's ``--rate``) is given, which turns them into seconds."""
    builder = ProfileBuilder({"source": source, "weight_unit": "count", "collector": "py-spy"})
    threads = _Threads(builder)
    frame_ids: dict[str, int] = {}
    stacks: dict[str, tuple[int, int]] = {}
    reader = FoldedLines(_records(lines), source, strict)
    for stack, weight in reader:
        entry = stacks.get(stack)
        if entry is None:
            roots, rest = split_roots(stack)
            ids = []
            for name in rest.split(";") if rest else ():
                fid = frame_ids.get(name)
                if fid is None:
                    fid = frame_ids[name] = builder.frame(parse_frame(name))
                ids.append(fid)
            entry = stacks[stack] = (threads.thread(roots), builder.stack_id(ids))
        builder.add_sample(0.0, entry[0], entry[1], weight, weight)
    note_skipped(
        builder.meta, source, reader.skipped, f"line {reader.first_bad}", found=builder.num_samples > 0
    )
    profile = builder.build()
    return counts_to_seconds(profile, rate) if rate else profile


def _whole_root(name: str) -> tuple | None:
    """The root tuple of a speedscope frame named exactly like one py-spy root frame, else None."""
    roots, rest = split_roots(name)
    return roots[0] if len(roots) == 1 and not rest else None


def _finite(value: object) -> float | None:
    """A JSON number as a float, or None when it is not one or is not finite (1e400, or an integer past
    a double, would overflow the arithmetic on times and weights)."""
    if type(value) is int:
        return float(value) if abs(value) < 1e300 else None
    if type(value) is float and math.isfinite(value):
        return value
    return None


def _speedscope_frame(entry: object) -> Frame:
    if not isinstance(entry, dict):
        raise ValueError("frame is not an object")
    name, file, line = entry.get("name"), entry.get("file") or "", entry.get("line") or 0
    if not isinstance(name, str) or not isinstance(file, str) or not isinstance(line, int):
        raise ValueError("frame needs a string name")
    return Frame(name, file, line, file_kind(file) if file else "python")


def read_speedscope(data: bytes | str, source: str = "<stdin>", strict: bool = True) -> Profile:
    """Import a speedscope JSON file (py-spy writes one ``sampled`` profile per thread; ``evented``
    profiles are accepted too). Weights in time units become seconds, others stay counts."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise FlameprofError(f"{source}: not valid speedscope JSON ({exc})") from None
    shared = doc.get("shared") if isinstance(doc, dict) else None
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if (
        not isinstance(shared, dict)
        or not isinstance(shared.get("frames"), list)
        or not isinstance(profiles, list)
    ):
        raise FlameprofError(f"{source}: not a speedscope file (needs 'shared.frames' and 'profiles')")
    try:
        frames = [_speedscope_frame(f) for f in shared["frames"]]
    except ValueError as exc:
        raise FlameprofError(f"{source}: bad speedscope frame ({exc})") from None
    exporter = str(doc.get("exporter") or "")
    builder = ProfileBuilder(
        {"source": source, "collector": "py-spy" if exporter.startswith("py-spy") else "speedscope"}
    )
    reader = _SpeedscopeReader(builder, frames, source, strict)
    for number, prof in enumerate(profiles):
        reader.profile(number, prof)
    note_skipped(
        builder.meta,
        source,
        reader.skipped,
        reader.first_bad or "",
        "malformed speedscope sample",
        found=builder.num_samples > 0,
    )
    builder.meta["weight_unit"] = reader.unit or "count"
    return builder.build()


class _SpeedscopeReader:
    """Adds the samples of each speedscope profile to one builder, mapping root frames to threads."""

    def __init__(self, builder: ProfileBuilder, frames: list[Frame], source: str, strict: bool) -> None:
        self.builder = builder
        self.frames = frames
        self.roots = [_whole_root(f.name) if not f.file else None for f in frames]
        self.frame_ids: dict[int, int] = {}
        self.threads = _Threads(builder)
        self.source = source
        self.strict = strict
        self.unit: str | None = None
        self.skipped = 0
        self.first_bad: str | None = None

    def bad(self, where: str, why: str) -> None:
        if self.strict:
            raise FlameprofError(f"{self.source}: {where}: {why}")
        self.skipped += 1
        self.first_bad = self.first_bad or where

    def profile(self, number: int, prof: object) -> None:
        where = f"profile {number}"
        if not isinstance(prof, dict):
            return self.bad(where, "not an object")
        unit = prof.get("unit", "none")
        unit = unit if isinstance(unit, str) else "none"
        scale = _UNITS.get(unit, 1.0)
        unit = "seconds" if unit in _UNITS else "count" if unit == "none" else unit
        if self.unit is None:
            self.unit = unit
        elif unit != self.unit:
            return self.bad(where, f"unit {unit} differs from {self.unit}")
        name = str(prof.get("name") or "")
        m = _PROFILE_THREAD.search(name)
        default = (_thread_id(m.group(1)), m.group(2) or "") if m else (number, name)
        start = _finite(prof.get("startValue", 0))
        if start is None:
            return self.bad(where, "startValue is not a finite number")
        if prof.get("type") == "evented":
            self.evented(where, prof.get("events"), start, scale, default)
        else:
            self.sampled(where, prof.get("samples"), prof.get("weights"), start, scale, default)

    def stack(self, indices: list, default: tuple) -> tuple[int, int]:
        """(thread index, stack id) of a root-first list of frame indices; raises ValueError on bad ones."""
        roots: list[tuple] = []
        n = 0
        for i in indices:
            root = self.roots[i] if type(i) is int and 0 <= i < len(self.roots) else None
            if root is None or (roots and roots[-1][0] == "thread"):
                break
            roots.append(root)
            n += 1
        ids = []
        for i in indices[n:]:
            if type(i) is not int or not 0 <= i < len(self.frames):
                raise ValueError(f"frame index {i!r} out of range")
            fid = self.frame_ids.get(i)
            if fid is None:
                fid = self.frame_ids[i] = self.builder.frame(self.frames[i])
            ids.append(fid)
        return self.threads.thread(roots, *default), self.builder.stack_id(ids)

    def sampled(
        self, where: str, samples: object, weights: object, start: float, scale: float, default: tuple
    ) -> None:
        if not isinstance(samples, list) or not isinstance(weights, list) or len(samples) != len(weights):
            return self.bad(where, "needs 'samples' and 'weights' lists of the same length")
        time = start
        for k, (indices, raw) in enumerate(zip(samples, weights)):
            weight = _finite(raw)
            if not isinstance(indices, list) or weight is None or weight < 0:
                self.bad(f"{where} sample {k}", "malformed sample")
                continue
            try:
                thread, sid = self.stack(indices, default)
                self.builder.add_sample(time * scale, thread, sid, weight * scale, weight * scale)
            except ValueError as exc:
                self.bad(f"{where} sample {k}", str(exc))
            time += weight  # a skipped sample still took its time

    def evented(self, where: str, events: object, start: float, scale: float, default: tuple) -> None:
        if not isinstance(events, list):
            return self.bad(where, "needs an 'events' list")
        open_frames: list[int] = []
        last = start
        for k, ev in enumerate(events):
            at = _finite(ev.get("at")) if isinstance(ev, dict) else None
            kind = ev.get("type") if isinstance(ev, dict) else None
            frame = ev.get("frame") if isinstance(ev, dict) else None
            if (
                at is None
                or at < last
                or kind not in ("O", "C")
                or type(frame) is not int
                or not 0 <= frame < len(self.frames)
                or (kind == "C" and (not open_frames or open_frames[-1] != frame))
            ):
                self.bad(f"{where} event {k}", "malformed or unbalanced event")
                continue
            if open_frames and at > last:
                thread, sid = self.stack(open_frames, default)
                self.builder.add_sample(last * scale, thread, sid, (at - last) * scale, (at - last) * scale)
            last = at
            if kind == "O":
                open_frames.append(frame)
            else:
                open_frames.pop()
