"""Read collapsed-stack ("folded") text, as written by flameprof, py-spy, stackcollapse-*.pl or inferno."""

from __future__ import annotations

import math
import re
import sys
from typing import TYPE_CHECKING, Iterable, Iterator

from ..errors import FlameprofError
from ..records import Frame, ProfileBuilder

if TYPE_CHECKING:
    from ..model import Profile

# "name (path/file.py:12)" as written by flameprof and py-spy; anything else is a bare name.
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d{1,9}))?\)$")
_NATIVE_SUFFIX = ("_[k]", "_[j]", "_[i]")


def file_kind(file: str) -> str:
    """``native`` for C/C++ sources and shared libraries, else ``python``."""
    return "native" if file.endswith((".so", ".c", ".cpp", ".h")) or ".so." in file else "python"


def parse_frame(text: str) -> Frame:
    """Turn one folded frame label back into a Frame (file and line when the label carries them)."""
    m = _FRAME.match(text)
    if m and m.group("file"):
        file = m.group("file")
        return Frame(m.group("name"), file, int(m.group("line") or 0), file_kind(file))
    kind = "native" if text.endswith(_NATIVE_SUFFIX) or "::" in text else "python"
    return Frame(text, "", 0, kind)


class FoldedLines:
    """The well-formed ``(stack, weight)`` lines of ``(line number, text)`` pairs of folded text;
    malformed ones are counted in ``skipped`` (first at ``first_bad``), or raise FlameprofError with
    their number when ``strict``."""

    def __init__(self, numbered: Iterable[tuple[int, str]], source: str = "<stdin>", strict: bool = True) -> None:
        self.numbered = numbered
        self.source = source
        self.strict = strict
        self.skipped = 0
        self.first_bad: int | None = None

    def __iter__(self) -> Iterator[tuple[str, float]]:
        for number, raw in self.numbered:
            line = raw.rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            stack, sep, count = line.rpartition(" ")
            try:
                weight = float(count)
                if not sep or not stack.strip() or not 0 <= weight < math.inf:
                    raise ValueError
            except ValueError:
                if self.strict:
                    raise FlameprofError(f"{self.source}:{number}: malformed folded line (expected "
                                         f"'frame;frame;... count'): {line[:80]!r}") from None
                self.skipped += 1
                self.first_bad = self.first_bad or number
                continue
            yield stack, weight


def note_skipped(meta: dict | None, source: str, skipped: int, first: str, what: str = "malformed line") -> None:
    """Record skipped input in ``meta['skipped_lines']`` and print the one warning line about it."""
    if not skipped:
        return
    if meta is not None:
        meta["skipped_lines"] = skipped
    print(f"flameprof: warning: {source}: skipped {skipped} {what}(s), first at {first}", file=sys.stderr)


def counts_to_seconds(profile: Profile, rate: float) -> Profile:
    """Turn sample counts into seconds for a known sampling rate (Hz); other units are left alone."""
    if rate <= 0 or profile.meta.get("weight_unit") != "count":
        return profile
    profile.sample_wall = profile.sample_wall / rate
    profile.sample_cpu = profile.sample_cpu / rate
    profile.meta.update(weight_unit="seconds", rate=rate)
    return profile


def read_folded(lines: Iterable[str], source: str = "<stdin>", strict: bool = True,
                unit: str = "count") -> Profile:
    """Build a Profile with one sample per line, weighted by its count (which may be fractional).

    ``strict`` raises FlameprofError at the first malformed line (with its number); otherwise such
    lines are skipped and counted in ``meta['skipped_lines']``.
    """
    builder = ProfileBuilder({"source": source, "weight_unit": unit, "collector": "folded"})
    thread = builder.thread_id(0, 0, "")
    frame_cache: dict[str, int] = {}
    stack_cache: dict[str, int] = {}
    reader = FoldedLines(enumerate(lines, 1), source, strict)
    for stack, weight in reader:
        sid = stack_cache.get(stack)
        if sid is None:
            ids = []
            for part in stack.split(";"):
                fid = frame_cache.get(part)
                if fid is None:
                    fid = frame_cache[part] = builder.frame(parse_frame(part))
                ids.append(fid)
            sid = stack_cache[stack] = builder.stack_id(ids)
        builder.add_sample(0.0, thread, sid, weight, weight)
    note_skipped(builder.meta, source, reader.skipped, f"line {reader.first_bad}")
    return builder.build()


def load_folded(path: str, strict: bool = True) -> Profile:
    """Read a folded file (``-`` for stdin)."""
    if path == "-":
        return read_folded(sys.stdin, "<stdin>", strict)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return read_folded(fh, path, strict)
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None

