"""Read collapsed-stack ("folded") text, as written by flameprof, py-spy, stackcollapse-*.pl or inferno."""

from __future__ import annotations

import re
import sys
from typing import Iterable

from ..errors import FlameprofError
from ..model import Frame, Profile, ProfileBuilder

# "name (path/file.py:12)" as written by flameprof and py-spy; anything else is a bare name.
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_NATIVE_SUFFIX = ("_[k]", "_[j]", "_[i]")


def parse_frame(text: str) -> Frame:
    """Turn one folded frame label back into a Frame (file and line when the label carries them)."""
    m = _FRAME.match(text)
    if m and m.group("file"):
        file = m.group("file")
        kind = "native" if file.endswith((".so", ".c", ".cpp", ".h")) or ".so." in file else "python"
        return Frame(m.group("name"), file, int(m.group("line") or 0), kind)
    kind = "native" if text.endswith(_NATIVE_SUFFIX) or "::" in text else "python"
    return Frame(text, "", 0, kind)


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
    skipped = 0
    first_bad = None
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.startswith("#"):
            continue
        stack, sep, count = line.rpartition(" ")
        try:
            weight = float(count)
            if not sep or not stack.strip() or weight < 0 or weight != weight:
                raise ValueError
        except ValueError:
            if strict:
                raise FlameprofError(f"{source}:{number}: malformed folded line (expected 'frame;frame;... count'): "
                                     f"{line[:80]!r}") from None
            skipped += 1
            first_bad = first_bad or number
            continue
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
    if skipped:
        builder.meta["skipped_lines"] = skipped
        print(f"flameprof: warning: {source}: skipped {skipped} malformed line(s), first at line {first_bad}",
              file=sys.stderr)
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

