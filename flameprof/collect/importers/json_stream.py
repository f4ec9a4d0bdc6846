"""Read a large JSON document from a binary stream one array element at a time: the top-level
object's members are decoded as they come, and the elements of one array member are yielded one by
one, so neither the file's bytes nor its text nor its tree of Python objects is ever held whole
(the tree alone takes about eight times the file).

The elements are decoded by orjson in batches: a buffer's worth of text up to the last ``},`` is
parsed as one array, which succeeds exactly when the cut falls between two elements (inside a
string or a nested object the batch does not parse). Anything orjson refuses (a cut that fell
elsewhere, NaN, integers past 64 bits, a defect) is decoded again one value at a time by the
standard library, which gives the precise error and the standard library's reading of what it
accepts; every byte is thus decoded a bounded number of times (linear time).

A caller with a faster reader of the elements (the C ``Scanner`` of Kineto traces, which keeps what it
needs of them as columns) passes it as ``scan``: it reads the buffer from a position on and says
where it stopped and why; only the elements it leaves to Python are decoded here and yielded."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

CHUNK = 1 << 20  # bytes read (and decoded as one batch) at a time
MAX_VALUE = 256 << 20  # a header member or an event larger than this is refused (bounded memory)
_FIRST_WINDOW = 4096  # bytes a single value is first looked for in; doubled until it fits
_BATCH_TRIES = 4  # cuts tried, last first, before a batch is decoded one value at a time
_DECODER = json.JSONDecoder()
_SPACE = re.compile(rb"[ \t\n\r]*")


# What a scan says of where it stopped: the buffer ends inside an element, the element there is
# Python's to decode, or the array ended (the position is then past its ``]``).
SCAN_MORE, SCAN_SLOW, SCAN_END = 1, 2, 3
Scan = Callable[[bytes, int], tuple[int, int]]


class JsonDefect(ValueError):
    """The text is not the JSON expected; the message says where (line and column)."""


class ByteSource(Protocol):
    """What the reader reads from: a binary file, or a decompressing stream over one."""

    def read(self, size: int = -1, /) -> bytes: ...


class _Reader:
    """A byte buffer over ``fh`` that drops what was read, keeping the line count for messages."""

    def __init__(self, fh: ByteSource) -> None:
        self.fh, self.chunk = fh, CHUNK
        self.buf, self.pos, self.eof = b"", 0, False
        self.offset = 0  # of buf[0] in the stream
        self.lines = 0  # newlines before buf
        self.column = 0  # bytes after the last newline before buf

    def fill(self) -> bool:
        """Read one more chunk (dropping what was consumed); False at the end of the stream."""
        if self.eof:
            return False
        data = self.fh.read(self.chunk)
        if self.pos:  # counted where they lie: a copy of the dropped part would cost as much again
            newlines = self.buf.count(b"\n", 0, self.pos)
            self.lines += newlines
            last = self.buf.rfind(b"\n", 0, self.pos)
            self.column = self.pos - last - 1 if newlines else self.column + self.pos
            self.offset += self.pos
            self.buf, self.pos = self.buf[self.pos :], 0
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def where(self, pos: int) -> str:
        line = self.lines + self.buf.count(b"\n", 0, pos) + 1
        last = self.buf.rfind(b"\n", 0, pos)
        column = pos - last if last >= 0 else self.column + pos + 1
        return f"line {line} column {column}"

    def peek(self) -> bytes:
        """The next non-space byte (consumed up to it), or b'' at the end."""
        while True:
            # _SPACE matches the empty string, so match() never gives None: the stubs cannot know it
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self.fill():
                return self.buf[self.pos : self.pos + 1]

    def expect(self, char: bytes) -> None:
        found = self.peek()
        if found != char:
            what = "the end" if not found else repr(found.decode("latin-1"))
            raise JsonDefect(f"expected {char.decode()!r} at {self.where(self.pos)}, found {what}")
        self.pos += 1

    def value(self) -> object:
        """One value decoded by the standard library, reading more until it is whole."""
        self.peek()
        window = _FIRST_WINDOW
        while True:
            pos, buf = self.pos, self.buf
            end = min(len(buf), pos + window)
            whole = end == len(buf) and self.eof  # nothing after the window
            raw = buf[pos:end]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if whole or exc.start < len(raw) - 3:
                    raise JsonDefect(f"not UTF-8 text at byte {self.offset + pos + exc.start}") from None
                text = raw[: exc.start].decode("utf-8")
            try:
                value, n = _DECODER.raw_decode(text)
                used = n if raw.isascii() else len(text[:n].encode("utf-8"))
                if whole or pos + used < len(buf):  # a number or literal cut at the end would read short
                    self.pos = pos + used
                    return value
                error = None
            except json.JSONDecodeError as exc:
                error = f"{exc.msg} at {self.where(pos + len(text[: exc.pos].encode('utf-8')))}"
            except RecursionError:
                error = f"nested too deeply at {self.where(pos)}"
            if whole:
                raise JsonDefect(error or f"incomplete value at {self.where(pos)}")
            if end - pos >= MAX_VALUE:
                raise JsonDefect(error or f"a value of more than {MAX_VALUE >> 20} MB at {self.where(pos)}")
            window *= 2  # doubled each time, and the buffer read up to it: linear in the value's size
            while len(self.buf) - self.pos < window and self.fill():
                pass

    def batch(self) -> tuple[list, int]:
        """As many whole elements as orjson decodes from the buffer (none when no cut works), and
        the position up to which the standard library must read when none did."""
        if len(self.buf) - self.pos < self.chunk // 2 and not self.eof:
            self.fill()
        buf, pos = self.buf, self.pos
        cut = len(buf)
        for _ in range(_BATCH_TRIES):
            cut = buf.rfind(b"},", pos, cut)
            if cut < 0:
                break
            try:
                return orjson.loads(b"[" + buf[pos : cut + 1] + b"]"), cut + 1
            except orjson.JSONDecodeError:
                continue
        return [], len(buf)


def _elements(reader: _Reader, scan: Scan | None = None) -> Iterator[object]:
    """The elements of the array opening next (those ``scan`` leaves, when given); the reader is then
    after its ``]``."""
    reader.expect(b"[")
    if reader.peek() == b"]":
        reader.pos += 1
        return
    if scan is not None:
        yield from _scanned(reader, scan)
        return
    slow_until = 0  # absolute offset: decode one value at a time up to here (a batch failed there)
    while True:
        if reader.offset + reader.pos >= slow_until:
            elements, cut = reader.batch()
            if elements:
                yield from elements
                reader.pos = cut
                reader.expect(b",")
                continue
            slow_until = reader.offset + cut
        yield reader.value()
        if reader.peek() == b"]":
            reader.pos += 1
            return
        reader.expect(b",")


def _scanned(reader: _Reader, scan: Scan) -> Iterator[object]:
    """The elements ``scan`` leaves to Python, decoded one at a time; ``scan`` reads the rest. An
    element that one more chunk does not complete is Python's too (its window doubles: linear)."""
    waited = False  # the element at reader.pos was given one more chunk and is still cut
    while True:
        before = reader.offset + reader.pos
        reader.pos, status = scan(reader.buf, reader.pos)
        if status == SCAN_END:
            return
        if reader.offset + reader.pos != before:
            waited = False
        if status == SCAN_MORE and not waited:
            waited = True
            if reader.fill():
                continue
        yield reader.value()
        waited = False
        if reader.peek() == b"]":
            reader.pos += 1
            return
        reader.expect(b",")


def stream_member(
    fh: ByteSource, member: str, header: dict[str, Any], scan: Scan | None = None
) -> Iterator[object]:
    """Yield the elements of array ``member`` of the top-level object in ``fh`` (or of the document
    itself when it is an array), filling ``header`` with the object's other members as they are
    read; with ``scan``, only those it leaves to Python. Raises JsonDefect (with line and column) on
    anything else, also after the last element."""
    reader = _Reader(fh)
    if reader.peek() == b"[":
        yield from _elements(reader, scan)
        _end(reader)
        return
    reader.expect(b"{")
    found = False
    if reader.peek() == b"}":
        reader.pos += 1
    else:
        while True:
            at = reader.pos
            key = reader.value()
            if not isinstance(key, str):
                raise JsonDefect(f"expected a member name at {reader.where(at)}")
            reader.expect(b":")
            if key == member and not found:
                found = True
                yield from _elements(reader, scan)
            else:
                header[key] = reader.value()
            if reader.peek() == b"}":
                reader.pos += 1
                break
            reader.expect(b",")
    _end(reader)
    if not found:
        raise JsonDefect(f"no {member} array")


def _end(reader: _Reader) -> None:
    if reader.peek():
        raise JsonDefect(f"extra data at {reader.where(reader.pos)}")
