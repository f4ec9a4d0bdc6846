"""Linear-time matchers for ``perf script`` lines, with exactly the results of the patterns
stackcollapse-perf.pl applies. Those patterns backtrack badly on hostile lines: the event pattern's
``(\\d+)*`` is exponential in a run of digits (30 digits: minutes), and the header and frame patterns
are quadratic in a run of spaces or of `` (``. Each function here says which pattern it stands for.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_SPACE = b" \t\n\r\x0b\x0c"  # Perl's and Python's \s in a bytes pattern
_DIGITS = b"0123456789"
# ``:\s*(\d+)*\s+(\S+):\s*$``, the same matches without a nested or an ambiguous repetition
EVENT = re.compile(rb":(?:\s*(\d+))?\s+(\S+):\s*$")
_WORD = re.compile(rb"\s*(\w+)")


class Header(NamedTuple):
    """An event record's first line: command, pid (or tid), tid, and where the pid ends."""

    comm: bytes
    pid: bytes
    tid: bytes | None
    pid_end: int


def _run(line: bytes, i: int, chars: bytes) -> int:
    """The end of the run of ``chars`` starting at ``i``."""
    n = len(line)
    while i < n and line[i] in chars:
        i += 1
    return i


def header(line: bytes) -> Header | None:
    """``(\\S.+?)\\s+(\\d+)/*(\\d+)*\\s+`` matched at the start of ``line`` (which holds no newline: the
    reader splits on them): the shortest command of two characters or more, starting with a non-space,
    that a space run, a pid, optional slashes, an optional tid and a space follow. Only a whole space
    run can follow the command, so each run is tried once."""
    if len(line) < 2 or line[0] in _SPACE:
        return None
    i, n = 2, len(line)
    while i < n:
        if line[i] not in _SPACE:
            i += 1
            continue
        spaces = _run(line, i, _SPACE)
        pid_end = _run(line, spaces, _DIGITS)
        if pid_end > spaces:
            slashes = _run(line, pid_end, b"/")
            tid_end = _run(line, slashes, _DIGITS)
            if tid_end < n and line[tid_end] in _SPACE:
                tid = line[slashes:tid_end] if tid_end > slashes else None
                return Header(line[:i], line[spaces:pid_end], tid, pid_end)
        i = spaces  # a longer command ending inside this run leaves a space where the pid must start
    return None


def frame(line: bytes) -> tuple[bytes, bytes, bytes] | None:
    """``\\s*(\\w+)\\s*(.+) \\((.*)\\)`` matched at the start of ``line`` (no newline in it): address,
    symbol and module. The module lies between the last `` (`` before the last ``)`` and that ``)``; the
    symbol runs from after the address and its spaces to that `` (``, and takes spaces or address
    characters back when it would otherwise be empty."""
    m = _WORD.match(line)
    if m is None:
        return None
    close = line.rfind(b")")
    opening = line.rfind(b" (", 0, close) if close > 0 else -1
    symbol = min(_run(line, m.end(), _SPACE), opening - 1)
    if symbol < m.start(1) + 1:
        return None
    return line[m.start(1) : min(m.end(1), symbol)], line[symbol:opening], line[opening + 2 : close]


def is_go_method(func: bytes) -> bool:
    """``\\.\\(.*\\)\\.`` found in ``func``: a ``.(`` with a ``).`` after it."""
    start = func.find(b".(")
    return start >= 0 and func.find(b").", start + 2) >= 0


def without_brackets(line: bytes) -> bytes:
    """``line`` without each ``[...]`` (``\\[.*?\\]`` replaced by nothing)."""
    out, i = [], 0
    while True:
        start = line.find(b"[", i)
        end = line.find(b"]", start + 1) if start >= 0 else -1
        if end < 0:
            out.append(line[i:])
            return b"".join(out)
        out.append(line[i:start])
        i = end + 1


_FRAME_START = re.compile(rb"[ \t]+[0-9a-fA-F]+ ")


def looks_like_frame(line: bytes) -> bool:
    """``[ \\t]+[0-9a-fA-F]+ .* \\(.*\\)\\r?$`` matched at the start of ``line`` (no newline in it)."""
    m = _FRAME_START.match(line)
    if m is None:
        return False
    body = line[m.end() :]
    body = body[:-1] if body.endswith(b"\r") else body
    return body.endswith(b")") and body.find(b" (", 0, len(body) - 1) >= 0
