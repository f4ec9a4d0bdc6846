"""Part files: each profiled process of a job writes its samples to ``part-<host>-<pid>.flameprof``.

A part is an ordinary ``.flameprof`` file, written without numpy (children must stay light and may
run an interpreter that has none) and rewritten in place, atomically, at every flush: a reader sees
the previous complete part or the next one, never half of one. The memory limit
(``collect/engine/memory_limit.py``) bounds the rows it holds, and so the cost of a flush.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zipfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain
from typing import IO

from ...atomic import atomic_file
from ...model.builder import ProfileBuilder
from ...model.fileformat import (
    FORMAT,
    VERSION,
    frame_row,
    json_text,
    mark_row,
    process_row,
    thread_row,
    write_zip,
)
from ...model.records import GIL_UNKNOWN, SAMPLE_COLUMNS, ProcessInfo
from ..process_alive import alive

PREFIX = "part-"
SUFFIX = ".flameprof"
_ENDIAN = "<" if sys.byteorder == "little" else ">"


def part_path(directory: str, host: str, pid: int) -> str:
    return os.path.join(directory, f"{PREFIX}{host}-{pid}{SUFFIX}")


def _npy_header(code: str, rows: int) -> bytes:
    """The header of numpy's ``.npy`` format (version 1.0) for ``rows`` integers of array typecode
    ``code`` (signed, or ``B``: bytes): padded text."""
    descr = "|u1" if code == "B" else f"{_ENDIAN}i{array(code).itemsize}"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows},), }}"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def _us(seconds) -> list[int]:
    return [round(s * 1e6) for s in seconds]


def _series(times: list[float], values: list[float]) -> list[list[float]]:
    n = len(times)  # a recorder appends values first and the time last
    return [list(times[:n]), list(values[:n])]


_ARRAY_CODES = ("q", "i", "i", "q", "q", "B")  # of the sample columns in a part (SAMPLE_COLUMNS' order)
CHUNK_TICKS = 8192  # ticks converted at a time: a part is streamed, never held whole
WRITE_BLOCK = 4 << 20  # bytes of a part written at a time (_Appender)
CRC_PIECE = 4096  # bytes the zip's checksum reads at a time (_crc_pieces)


class PartWriter:
    """Rewrites one process's part from a ProfileBuilder that a sampler keeps filling.

    Everything the builder holds is this process's (a forked child drops its parent's samples and
    marks first, see child.py). The part is streamed to its file a column and a chunk of rows at a
    time, the native sampler's rows converted in C, so writing it takes little memory however many
    rows there are. Lengths are read samples first, then threads, stacks and frames: everything a
    sample refers to was recorded before the sample, so tables cut at those lengths are consistent
    without stopping the sampler.
    """

    def __init__(self, directory: str, builder: ProfileBuilder, host: str, pid: int) -> None:
        self.path = part_path(directory, host, pid)
        self.builder = builder
        self.lock = threading.Lock()
        self.written = -1  # samples recorded when the file on disk was written; -1 before the first
        self._frames_json: list[str] = []  # the tables only grow: each write encodes only what is new

    def write(
        self,
        process: ProcessInfo,
        meta: dict,
        counters: dict,
        final: bool = False,
        timeout: float | None = None,
    ) -> float:
        """Write the part if it changed (always when ``final``); returns the CPU seconds it took.

        ``counters`` maps a name to (times, values) lists; ``timeout`` bounds the wait for a
        write in progress on another thread (then nothing is written).
        """
        start = time.thread_time()  # CPU time: on a busy machine the wall time of a flush is mostly waiting
        if not self.lock.acquire(timeout=-1 if timeout is None else timeout):
            return 0.0
        try:
            b = self.builder
            with b.lock:  # no rows are folded away while they are read
                b.collect_marks()
                recorded = b.num_samples
                if recorded == self.written and not final:
                    return 0.0
                sources = self._sources()
                marks = b.windowed_marks.marks() + list(b.marks)
                n_threads = len(b.threads)
                n_stacks = min(len(b.stack_parent), len(b.stack_frame))
                n_frames = len(b.frames)
                self._frames_json.extend(
                    json_text(frame_row(f)) for f in b.frames[len(self._frames_json) : n_frames]
                )
                meta = dict(meta, **b.fold_meta())
                tables = {
                    "meta.json": dict(meta, format=FORMAT, version=VERSION, final=final),
                    "threads.json": [thread_row(t) for t in b.threads[:n_threads]],
                    "processes.json": [process_row(process)],
                    "marks.json": [mark_row(m) for m in marks if m.thread < n_threads],
                    "counters.json": {k: _series(t, v) for k, (t, v) in counters.items()},
                }
                texts = {"frames.json": "[" + ",".join(self._frames_json[:n_frames]) + "]"}
                texts.update((name, json_text(table)) for name, table in tables.items())
                columns = {
                    "stack_parent": array("i", b.stack_parent[:n_stacks]),
                    "stack_frame": array("i", b.stack_frame[:n_stacks]),
                }
                # with the builder's lock held: no rows are taken off while they are converted
                with atomic_file(self.path, "wb", private=True) as fh:  # private: a program's stacks
                    out = _Appender(fh)
                    write_zip(out, texts, self._npy_members(columns, sources))
                    out.flush()
            self.written = recorded
        finally:
            self.lock.release()
        return time.thread_time() - start

    def _sources(self) -> list[tuple[int, Callable[[int], Iterable[bytes]]]]:
        """What the sample columns are made of, in row order: (rows, the bytes of column ``which``
        of them, in chunks) of the folded rows, each native store's completed ticks, and the list
        columns (appended time first, cpu last; their GIL states unknown)."""
        b = self.builder
        out = [_rows_source(b.windowed.rows())] if b.windowed.samples else []
        for store in b.sample_stores:
            ticks = store.completed_ticks
            out.append((store.rows_in(0, ticks), partial(_store_chunks, store, ticks)))
        n = len(b.cpu)
        gil = [GIL_UNKNOWN] * n
        out.append(_rows_source((b.time[:n], b.thread[:n], b.stack[:n], b.wall[:n], b.cpu[:n], gil)))
        return out

    def _npy_members(self, tables: dict[str, array], sources: list):
        """(member name, iterator of byte chunks) of every column, the sample columns converted as
        they are written."""
        for name, column in tables.items():
            yield name + ".npy", _crc_pieces((_npy_header("i", len(column)), column.tobytes()))
        rows = sum(n for n, _ in sources)
        for which, name in enumerate(SAMPLE_COLUMNS):
            header = _npy_header(_ARRAY_CODES[which], rows)
            yield name + ".npy", _crc_pieces(chain((header,), *(chunks(which) for _, chunks in sources)))


class _Appender:
    """A file written front to back, its position counted here and its bytes held until a block is
    full. Each system call lets the GIL go, and the sampler's thread, which flushes, then waits to
    take it back behind the program's busy threads (with 64 threads computing, most of a second a
    flush): ``zipfile`` asks a seekable file for its position dozens of times per part and seeks back
    to each member's header (unseekable, the zip puts each member's sizes after its data instead),
    and a file's own buffer writes every 8 KB."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self._position = 0
        self._held = bytearray()

    def write(self, data: bytes) -> int:
        self._held += data
        self._position += len(data)
        if len(self._held) >= WRITE_BLOCK:
            self._fh.write(self._held)
            self._held.clear()
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        if self._held:
            self._fh.write(self._held)
            self._held.clear()
        self._fh.flush()

    def close(self) -> None:
        """Nothing: the zip leaves a file it was handed open (``atomic_file`` closes it)."""


def _crc_pieces(chunks: Iterable[bytes]) -> Iterator[memoryview]:
    """``chunks`` cut into pieces the zip's checksum takes without letting the GIL go (zlib's crc32
    lets it go for more than 5 KB, once per chunk of a column: see _Appender)."""
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        for start in range(0, len(view), CRC_PIECE):
            yield view[start : start + CRC_PIECE]


def _rows_source(columns: tuple) -> tuple[int, Callable[[int], Iterable[bytes]]]:
    """A source of rows held as Python columns (time, thread, stack, wall, cpu, gil)."""

    def chunks(which: int) -> Iterable[bytes]:
        values = columns[which]
        yield array(_ARRAY_CODES[which], _us(values) if which in (0, 3, 4) else values).tobytes()

    return len(columns[0]), chunks


def _store_chunks(store, ticks: int, which: int) -> Iterable[bytes]:
    """Column ``which`` of a native store's first ``ticks`` ticks, converted in C a chunk at a time."""
    for first in range(0, ticks, CHUNK_TICKS):
        yield store.part_column(which, first, min(CHUNK_TICKS, ticks - first))


# -- the parent's side -------------------------------------------------------------------------


def part_files(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names if n.startswith(PREFIX) and n.endswith(SUFFIX))


def _part_state(path: str) -> tuple[bool, int]:
    """(done, pid) of a part, from its meta alone: done when final, unreadable, or written by a
    helper process that ends only after its parent (nothing to wait for)."""
    try:
        with zipfile.ZipFile(path) as zf:
            meta = json.loads(zf.read("meta.json"))
        return bool(meta.get("final") or meta.get("outlives_parent")), int(meta.get("pid", 0))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return True, 0


def wait_for_parts(directory: str, grace: float) -> list[str]:
    """Wait up to ``grace`` seconds for processes still running to write their final part.

    Returns the parts that are not final when the wait ends (their process was killed, or hangs).
    """
    deadline = time.monotonic() + grace
    while True:
        states = {path: _part_state(path) for path in part_files(directory)}
        partial = [path for path, (done, _) in states.items() if not done]
        if time.monotonic() >= deadline or not any(alive(states[path][1]) for path in partial):
            return partial
        time.sleep(0.05)
