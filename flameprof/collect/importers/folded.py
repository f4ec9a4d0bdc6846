"""Read collapsed-stack ("folded") text, as written by flameprof, py-spy, stackcollapse-*.pl or inferno."""

from __future__ import annotations

import codecs
import math
import re
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ...errors import FlameprofError
from ...model.records import Frame
from .skipped import note_skipped

if TYPE_CHECKING:
    from ...model.profile import Profile

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

    def __init__(
        self, numbered: Iterable[tuple[int, str]], source: str = "<stdin>", strict: bool = True
    ) -> None:
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
                    raise malformed_line(self.source, number, line) from None
                self.skipped += 1
                self.first_bad = self.first_bad or number
                continue
            yield stack, weight


def malformed_line(source: str, number: int, line: str) -> FlameprofError:
    """The error for a folded line that is not ``frame;frame;... count``."""
    return FlameprofError(
        f"{source}:{number}: malformed folded line (expected 'frame;frame;... count'): {line[:80]!r}"
    )


def counts_to_seconds(profile: Profile, rate: float) -> Profile:
    """Turn sample counts (and times counted in samples) into seconds for a known sampling rate (Hz);
    other units are left alone."""
    if rate <= 0 or profile.meta.get("weight_unit") != "count":
        return profile
    profile.sample_time = profile.sample_time / rate
    profile.sample_wall = profile.sample_wall / rate
    profile.sample_cpu = profile.sample_cpu / rate
    profile.meta.update(weight_unit="seconds", rate=rate)
    return profile


def read_folded(
    lines: Iterable[str], source: str = "<stdin>", strict: bool = True, unit: str = "count"
) -> Profile:
    """Build a Profile with one sample per line, weighted by its count (which may be fractional).

    ``strict`` raises FlameprofError at the first malformed line (with its number); otherwise such
    lines are skipped and counted in ``meta['skipped_lines']``. Stacks are numbered in order of first
    appearance, as the C reader (``read_folded_chunks``) numbers them.
    """
    import numpy as np

    frames = _FrameIds()
    frame_id = frames.__getitem__
    ids, lengths, weights = array("q"), array("q"), array("d")
    reader = FoldedLines(enumerate(lines, 1), source, strict)
    for stack, weight in reader:
        parts = stack.split(";")
        ids.extend(map(frame_id, parts))
        lengths.append(len(parts))
        weights.append(weight)
    parent, frame, leaf = _intern_stacks(
        np.frombuffer(ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64)
    )
    return _profile(
        frames.frames,
        parent,
        frame,
        leaf,
        np.frombuffer(weights, dtype=np.float64).copy(),
        source,
        unit,
        reader.skipped,
        reader.first_bad,
    )


def read_folded_chunks(
    chunks: Iterable[bytes | memoryview], source: str = "<stdin>", strict: bool = True, unit: str = "count"
) -> Profile:
    """``read_folded`` of UTF-8 text given as chunks of bytes cut anywhere (invalid bytes read as U+FFFD),
    by the C reader ``flameprof._folded`` when it is built (the same Profile, several times faster), else
    line by line in Python."""
    try:
        from ..._folded import FoldedParser
    except ImportError:
        return read_folded(_decoded_lines(chunks), source, strict, unit)
    import numpy as np

    frames = _FrameIds()
    parser = FoldedParser(frames.__getitem__, strict)
    for chunk in chunks:
        if not parser.feed(chunk):
            break
    parent, frame, leaf, weights, skipped, first_bad, bad = parser.finish()
    if bad is not None:
        number, line = bad
        raise malformed_line(source, number, line.decode("utf-8", "replace"))
    return _profile(
        frames.frames,
        np.frombuffer(parent, dtype=np.int32),
        np.frombuffer(frame, dtype=np.int32),
        np.frombuffer(leaf, dtype=np.int32),
        np.frombuffer(weights, dtype=np.float64),
        source,
        unit,
        skipped,
        first_bad,
    )


def _decoded_lines(chunks: Iterable[bytes | memoryview]) -> Iterator[str]:
    """The lines (without their ``\\n``) of UTF-8 text given as chunks of bytes cut anywhere."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    rest = ""
    for chunk in chunks:
        *lines, rest = (rest + decoder.decode(chunk)).split("\n")
        yield from lines
    rest += decoder.decode(b"", final=True)
    if rest:
        yield rest


def _profile(
    frames: list[Frame],
    parent,
    frame,
    leaf,
    weights,
    source: str,
    unit: str,
    skipped: int,
    first_bad: int | None,
) -> Profile:
    """The Profile of folded lines: one thread, one sample per line (its time unknown, so 0)."""
    import numpy as np

    from ...model.profile import Profile, ThreadInfo

    meta = {"source": source, "weight_unit": unit, "collector": "folded"}
    note_skipped(meta, source, skipped, f"line {first_bad}", found=len(weights) > 0)
    return Profile(
        frames=frames,
        stack_parent=parent,
        stack_frame=frame,
        threads=[ThreadInfo(0, 0, "")],
        sample_time=np.zeros(len(weights)),
        sample_thread=np.zeros(len(weights), dtype=np.int32),
        sample_stack=leaf,
        sample_wall=weights,
        sample_cpu=weights.copy(),
        meta=meta,
    )


class _FrameIds(dict):
    """Frame label text -> frame id; a new text is parsed once, and texts naming the same Frame share its
    id."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self._by_frame: dict[Frame, int] = {}

    def __missing__(self, text: str) -> int:
        frame = parse_frame(text)
        fid = self._by_frame.setdefault(frame, len(self.frames))
        if fid == len(self.frames):
            self.frames.append(frame)
        self[text] = fid
        return fid


def _intern_stacks(ids, lengths):
    """Intern stacks given as frame ids (``lengths[i]`` ids for line ``i``, root first, concatenated) into
    a parent-pointer table numbered in order of first appearance (by line, then depth): one ``np.unique``
    of (parent, frame) keys per depth level, then one renumbering. Returns stack_parent, stack_frame and
    each line's stack."""
    import numpy as np

    n = len(lengths)
    starts = np.cumsum(lengths) - lengths
    span = int(ids.max()) + 1 if len(ids) else 1
    node = np.full(n, -1, dtype=np.int64)
    parents, frames, first_lines, depths = [], [], [], []
    count = 0
    lines = np.arange(n)
    for k in range(int(lengths.max()) if n else 0):
        # the lines still this deep, ascending (first index = first line); filtered from the previous
        # level's, so one very deep line costs its own length, not its depth times the number of lines
        lines = lines[lengths[lines] > k]
        keys, first, inverse = np.unique(
            (node[lines] + 1) * span + ids[starts[lines] + k], return_index=True, return_inverse=True
        )
        parents.append(keys // span - 1)
        frames.append(keys % span)
        first_lines.append(lines[first])
        depths.append(np.full(len(keys), k))
        node[lines] = count + inverse.reshape(-1)
        count += len(keys)
    if not count:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.full(n, -1, dtype=np.int64)
    new_id = np.empty(count + 1, dtype=np.int64)  # slot -1 maps the roots' parent
    new_id[np.lexsort((np.concatenate(depths), np.concatenate(first_lines)))] = np.arange(count)
    new_id[-1] = -1
    parent, frame = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    parent[new_id[:-1]] = new_id[np.concatenate(parents)]
    frame[new_id[:-1]] = np.concatenate(frames)
    return parent, frame, new_id[node]
