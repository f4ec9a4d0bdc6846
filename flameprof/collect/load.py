"""Open any profile input by content: a ``.flameprof`` file, py-spy raw or speedscope output,
``perf script`` text or collapsed stacks (``-`` is stdin)."""

from __future__ import annotations

import io
import sys

from ..errors import FlameprofError
from ..model import Profile
from .. import storage
from .detect import FORMATS, HEAD, detect_format
from .folded_import import read_folded_bytes


def read_bytes(path: str) -> bytes:
    """The whole content of ``path`` (``-``: stdin), or one error line."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as fh:
            return fh.read()
    except IsADirectoryError:
        raise FlameprofError(f"{path} is a directory, not a profile") from None
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None


def load_bytes(data: bytes, source: str, fmt: str | None = None, strict: bool = True) -> Profile:
    """Parse ``data`` in format ``fmt`` (one of detect.FORMATS; detected when None)."""
    fmt = fmt or detect_format(data[:HEAD])
    if fmt not in FORMATS:
        raise FlameprofError(f"unknown input format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if fmt == "flameprof":
        return storage.loads(data, source)
    if fmt == "perf":
        from .perf_import import read_perf_script
        profile = read_perf_script([data], source, strict)
    elif fmt == "speedscope":
        from .pyspy_import import read_speedscope
        profile = read_speedscope(data, source, strict)
    else:
        if data.startswith(b"PERFILE"):
            raise FlameprofError(f"{source}: this is a perf.data file; import the text of 'perf script -i {source}'")
        if b"\x00" in data[:4096]:
            raise FlameprofError(f"{source}: not a profile, perf script or folded text (binary data)")
        if fmt == "pyspy":
            from .pyspy_import import read_pyspy_raw
            # decoded line by line: a StringIO of the whole text would hold it again, four bytes a character
            text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
            profile = read_pyspy_raw(text, source, strict)
        else:
            profile = read_folded_bytes(data, source, strict)
    if not profile.num_samples:
        raise FlameprofError(f"{source}: no stacks found (read as {fmt})")
    return profile


def load_input(path: str, strict: bool = True) -> Profile:
    """Load ``path`` in whichever supported format its content is."""
    return load_bytes(read_bytes(path), "<stdin>" if path == "-" else path, None, strict)
