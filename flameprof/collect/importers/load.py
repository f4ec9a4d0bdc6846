"""Open any profile input by content: a ``.flameprof`` file, py-spy raw or speedscope output,
``perf script`` text or collapsed stacks (``-`` is stdin)."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from functools import partial
from typing import BinaryIO, cast

from ...errors import FlameprofError
from ...model import storage
from ...model.profile import Profile
from ...model.validate import check_profile
from .detect import FORMATS, HEAD, detect_format
from .folded import counts_to_seconds, read_folded_chunks
from .kineto import open_document
from .kineto_profile import import_kineto, read_kineto, read_kineto_document
from .perf_profile import read_perf_script
from .pyspy import read_pyspy_raw, read_speedscope

# folded text is read this much at a time into one buffer: a file of gigabytes is never held whole,
# and the chunk the kernel copies in is still in the core's cache when the parser reads it
CHUNK = 128 << 10


@contextmanager
def _opened(path: str) -> Iterator[BinaryIO]:
    """``path`` open for reading (``-``: stdin); failing to open or read it is one error line."""
    try:
        if path == "-":
            yield sys.stdin.buffer
        else:
            with open(path, "rb") as fh:
                yield fh
    except IsADirectoryError:
        raise FlameprofError(f"{path} is a directory, not a profile") from None
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_bytes(path: str) -> bytes:
    """The whole content of ``path`` (``-``: stdin), or one error line."""
    with _opened(path) as fh:
        return fh.read()


def load_bytes(data: bytes, source: str, fmt: str | None = None, strict: bool = True) -> Profile:
    """Parse ``data`` in format ``fmt`` (one of detect.FORMATS; detected when None)."""
    fmt = fmt or detect_format(data[:HEAD])
    if fmt not in FORMATS:
        raise FlameprofError(f"unknown input format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if fmt == "flameprof":
        return storage.loads(data, source)
    if fmt not in ("perf", "speedscope", "kineto"):
        _check_text(data, source)
    with _held_warnings():
        if fmt == "kineto":
            profile = read_kineto(data, source)
        elif fmt == "perf":
            profile = read_perf_script([data], source, strict)
        elif fmt == "speedscope":
            profile = read_speedscope(data, source, strict)
        elif fmt == "pyspy":
            # decoded line by line: a StringIO of the whole text would hold it again, four bytes a character
            text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
            profile = read_pyspy_raw(text, source, strict)
        else:
            profile = read_folded_chunks([data], source, strict)
        return _found(profile, source, fmt)


@contextmanager
def _held_warnings() -> Iterator[None]:
    """Hold the warnings a reader prints (skipped lines, ...) until the profile it read is found good:
    an input refused after all ends in its one error line, not in a warning and then an error."""
    held = io.StringIO()
    with redirect_stderr(held):
        yield
    sys.stderr.write(held.getvalue())


def _check_text(head: bytes, source: str) -> None:
    """Refuse binary data that would otherwise read as (malformed) text."""
    if head.startswith(b"PERFILE"):
        raise FlameprofError(
            f"{source}: this is a perf.data file; import the text of 'perf script -i {source}'"
        )
    if b"\x00" in head[:4096]:
        raise FlameprofError(f"{source}: not a profile, perf script or folded text (binary data)")


def _found(profile: Profile, source: str, fmt: str) -> Profile:
    """``profile`` when it has samples and is consistent (``validate``: no renderer meets counts that
    sum past a double, say), else one error line."""
    if not profile.num_samples:
        raise FlameprofError(f"{source}: no stacks found (read as {fmt})")
    try:
        check_profile(profile)
    except ValueError as exc:
        raise FlameprofError(f"{source}: {exc} (read as {fmt})") from None
    return profile


def load_input(
    path: str,
    strict: bool = True,
    fmt: str | None = None,
    output: str | None = None,
    rate: float | None = None,
) -> Profile:
    """Load ``path`` in format ``fmt`` (whichever supported format its content is when None); folded
    text and Kineto traces are read a chunk at a time. ``rate``: the sampling rate (Hz) of input
    weighted in counts, to make them seconds. With ``output``, the profile is written there
    as a ``.flameprof`` too, and a Kineto trace goes to it a column at a time as it is read (it may
    be gigabytes, and its profile hundreds of megabytes): that profile is returned without its trace."""
    source = "<stdin>" if path == "-" else path
    with _opened(path) as fh:
        start = fh.tell() if fh.seekable() else None
        head = fh.read(HEAD)
        fmt = fmt or detect_format(head)
        data = None
        if fmt == "folded":
            _check_text(head, source)
            with _held_warnings():
                profile = _found(read_folded_chunks(_chunks(head, fh), source, strict), source, "folded")
        elif fmt == "kineto":  # streamed a chunk at a time: a trace may be gigabytes
            document = open_document(_rewound(fh, start, head), source)
            with _held_warnings():
                if output is not None:
                    with _writing(output, source) as out:
                        return import_kineto(document, source, out, partial(_found, source=source, fmt=fmt))
                profile = _found(read_kineto_document(document, source), source, fmt)
        elif start is not None:  # read whole from the start: no second copy to join the head to the rest
            fh.seek(start)
            data = fh.read()
        else:
            data = head + fh.read()
    if data is not None:
        profile = load_bytes(data, source, fmt, strict)
    if rate:
        profile = counts_to_seconds(profile, rate)
    if output is not None:
        with _writing(output, source) as out:
            out.profile(profile)
    return profile


def _chunks(head: bytes, fh: BinaryIO) -> Iterator[bytes | memoryview]:
    """``head``, then the rest of ``fh`` in chunks of ``CHUNK`` bytes read into one buffer: a chunk is
    overwritten by the next, so its reader keeps none."""
    yield head
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    readinto = cast(io.BufferedIOBase, fh).readinto  # a file opened "rb" and stdin's buffer both have it
    while size := readinto(buffer):
        yield view[:size]


@contextmanager
def _writing(output: str, source: str) -> Iterator[storage.ProfileWriter]:
    """``storage.writing(output)``, where failing to write is one error line (and so is a time or a
    weight past what the file stores); the file is left only when the block ends without one."""
    try:
        with storage.writing(output) as out:
            yield out
    except OSError as exc:
        raise FlameprofError(f"cannot write {output}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FlameprofError(f"{source}: {exc}") from None


def _rewound(fh: BinaryIO, start: int | None, head: bytes) -> BinaryIO:
    """``fh`` read again from ``start`` (its head put back in front when it cannot seek)."""
    if start is not None:
        fh.seek(start)
        return fh if hasattr(fh, "peek") else io.BufferedReader(fh)  # type: ignore[type-var]  # any stream with readinto() will do; the stubs want a raw one
    return io.BufferedReader(_Chained(head, fh))


class _Chained(io.RawIOBase):
    """``head`` then the rest of ``fh``: a pipe read again from its start."""

    def __init__(self, head: bytes, fh: BinaryIO) -> None:
        self.head, self.fh = head, fh

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.head[: len(buffer)] if self.head else self.fh.read(len(buffer))
        self.head = self.head[len(data) :]
        buffer[: len(data)] = data
        return len(data)
