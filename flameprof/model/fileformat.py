"""The ``.flameprof`` layout shared by its two writers: ``storage`` (numpy, whole profiles) and
``collect/parts`` (no numpy, inside profiled children). Rows and packing live here so both
writers emit the same tables; see ``storage`` for the layout."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable
from typing import Any, Protocol

from .records import Frame, Mark, ProcessInfo, ThreadInfo

FORMAT = "flameprof"
VERSION = 1
# deflate's fastest level: a profile's columns (small integers, repeated values) shrink nearly as much
# as at the default level 6 (about 7 % larger) in a third of the time
ZIP_LEVEL = 1


def frame_row(f: Frame) -> list[Any]:
    return [f.name, f.file, f.line, f.kind]


def thread_row(t: ThreadInfo) -> list[Any]:
    return [t.pid, t.tid, t.name]


def process_row(p: ProcessInfo) -> list[Any]:
    return [p.pid, p.role, p.host, p.cmdline, p.ppid]


def mark_row(m: Mark) -> list[Any]:
    return [m.time, m.thread, m.name, m.value]


def json_text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class ZipSink(Protocol):
    """What the zip is written to: a binary file, or a stream over one."""

    def write(self, data: bytes, /) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def open_zip(fh: ZipSink, compress: bool = False) -> zipfile.ZipFile:
    """A zip being written to ``fh``, its members added in any order (``write_member``)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    return zipfile.ZipFile(fh, "w", method, compresslevel=ZIP_LEVEL if compress else None)


def write_member(zf: zipfile.ZipFile, name: str, chunks: Iterable[bytes | memoryview]) -> None:
    """Add ``name`` to ``zf`` from its bytes in chunks: a column is written as it is made, not held."""
    with zf.open(name, "w") as out:
        for chunk in chunks:
            out.write(chunk)


def write_zip(
    fh: ZipSink,
    tables: dict[str, str],
    members: Iterable[tuple[str, Iterable[bytes | memoryview]]],
    compress: bool = False,
) -> None:
    """Write the zip to ``fh``: ``tables`` maps ``name.json`` to JSON text; ``members`` yields
    (file name, its bytes in chunks)."""
    with open_zip(fh, compress) as zf:
        for name, text in tables.items():
            zf.writestr(name, text)
        for name, chunks in members:
            write_member(zf, name, chunks)


def pack(tables: dict[str, str], columns: dict[str, bytes], compress: bool = True) -> bytes:
    """The zip as bytes: ``columns`` maps a column name to ``.npy`` bytes."""
    buf = io.BytesIO()
    write_zip(buf, tables, ((name + ".npy", (data,)) for name, data in columns.items()), compress)
    return buf.getvalue()
