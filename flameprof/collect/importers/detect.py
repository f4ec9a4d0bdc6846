"""Tell which profile format a file is in from its first bytes, so every command accepts every input."""

from __future__ import annotations

import re

from .perf_lines import looks_like_frame

FORMATS = ("flameprof", "kineto", "speedscope", "perf", "pyspy", "folded")
HEAD = 64 << 10

# A perf script sample: an unindented event line, then indented "address symbol (module)" lines
# (perf_lines.looks_like_frame).
_PYSPY_ROOT = re.compile(rb'(?:process \d+:"|thread \((?:0[xX][0-9a-fA-F]+|\d+)\))')


def detect_format(head: bytes) -> str:
    """The format of data starting with ``head``: one of FORMATS (``folded`` when nothing else fits)."""
    from ...model import storage

    if storage.is_flameprof_file(head[:4]):
        return "flameprof"
    if head.startswith(b"\x1f\x8b"):  # gzip: torch.profiler's .json.gz traces
        return "kineto"
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return "kineto" if b'"traceEvents"' in head or b'"schemaVersion"' in head else "speedscope"
    lines = [line for line in head.split(b"\n")[:200] if line.strip() and not line.startswith(b"#")]
    if any(looks_like_frame(line) for line in lines[:50]) or head.startswith(b"# ========\n# captured on"):
        return "perf"
    if lines and _PYSPY_ROOT.match(lines[0]):
        return "pyspy"
    return "folded"
