"""Part files: each profiled process of a job writes its samples to ``part-<host>-<pid>.flameprof``.

A part is an ordinary ``.flameprof`` file, written without numpy (children must stay light and may
run an interpreter that has none) and rewritten in place, atomically, at every flush: a reader sees
the previous complete part or the next one, never half of one. Only the samples taken since the
last flush are converted, so a flush costs little more than writing the file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zipfile
from array import array

from ...atomic import write_bytes
from ...model.builder import ProfileBuilder
from ...model.fileformat import FORMAT, VERSION, frame_row, json_text, mark_row, pack, process_row, thread_row
from ...model.records import SAMPLE_COLUMNS, ProcessInfo

PREFIX = "part-"
SUFFIX = ".flameprof"
_ENDIAN = "<" if sys.byteorder == "little" else ">"


def part_path(directory: str, host: str, pid: int) -> str:
    return os.path.join(directory, f"{PREFIX}{host}-{pid}{SUFFIX}")


def _npy(values: array) -> bytes:
    """``values`` in numpy's ``.npy`` format (version 1.0): a padded text header, then raw data."""
    header = (
        f"{{'descr': '{_ENDIAN}i{values.itemsize}', 'fortran_order': False, 'shape': ({len(values)},), }}"
    )
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return (
        b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + values.tobytes()
    )


def _us(seconds) -> list[int]:
    return [round(s * 1e6) for s in seconds]


def _raw(store, first_tick: int = 0) -> tuple:
    """A sample store's ticks from ``first_tick`` on and their rows, as memoryviews, without numpy
    (see CSampler.raw_columns)."""
    columns = store.raw_columns(first_tick)
    return tuple(memoryview(data or b"").cast(code) for data, code in zip(columns, store.RAW_TYPECODES))


def _ticks_and_rows(raw: tuple) -> tuple[int, int]:
    return len(raw[0]), len(raw[2])


def _series(times: list[float], values: list[float]) -> list[list[float]]:
    n = len(times)  # a recorder appends values first and the time last
    return [list(times[:n]), list(values[:n])]


class PartWriter:
    """Rewrites one process's part from a ProfileBuilder that a sampler keeps filling.

    Only samples and marks recorded after the writer was made are this process's (a forked child
    shares its parent's builder, tables and time base, and adds its own after the parent's).
    Lengths are read samples first, then threads, stacks and frames: everything a sample refers to
    was recorded before the sample, so tables cut at those lengths are consistent without stopping
    the sampler.
    """

    def __init__(self, directory: str, builder: ProfileBuilder, host: str, pid: int) -> None:
        self.path = part_path(directory, host, pid)
        self.builder = builder
        self.lock = threading.Lock()
        self.written = -1  # samples in the file on disk; -1 before the first write
        self._columns = [
            array("q"),
            array("i"),
            array("i"),
            array("q"),
            array("q"),
        ]  # time thread stack wall cpu
        self._frames_json: list[str] = []  # the tables only grow: each flush encodes only what is new
        self._stack_parent = array("i")
        self._stack_frame = array("i")
        self._first_mark = len(builder.marks)
        self._list_done = len(builder.cpu)
        self._store_done = [_ticks_and_rows(_raw(store)) for store in builder.sample_stores]

    def _add_new_samples(self) -> int:
        """Convert the samples recorded since the last call; returns how many are this process's now."""
        b = self.builder
        time_us, thread, stack, wall_us, cpu_us = self._columns
        for i, store in enumerate(b.sample_stores):  # the native sampler's rows
            if i == len(self._store_done):
                self._store_done.append((0, 0))
            tick_done, row_done = self._store_done[i]
            if len(store) < row_done:  # the store was reset: all its rows are new
                tick_done, row_done = 0, 0
            times, per_tick, threads, stacks, walls, cpus = _raw(store, tick_done)  # the new ticks only
            if sum(per_tick) != len(threads) or len(threads) != len(cpus):
                continue  # not the rows this writer expects: skip them this time, never guess
            t0 = store.t0
            for tick, rows in zip(times, per_tick):
                time_us.extend([round((tick - t0) * 1e6)] * rows)
            thread.extend(threads.tolist())
            stack.extend(stacks.tolist())
            wall_us.extend(_us(walls.tolist()))
            cpu_us.extend(_us(cpus.tolist()))
            self._store_done[i] = (tick_done + len(times), row_done + len(threads))
        n_list = len(b.cpu)  # the list columns are appended time first, cpu last
        done = self._list_done
        time_us.extend(_us(b.time[done:n_list]))
        thread.extend(b.thread[done:n_list])
        stack.extend(b.stack[done:n_list])
        wall_us.extend(_us(b.wall[done:n_list]))
        cpu_us.extend(_us(b.cpu[done:n_list]))
        self._list_done = n_list
        return len(time_us)

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
            b.collect_marks()
            n = self._add_new_samples()
            if n == self.written and not final:
                return 0.0
            n_threads = len(b.threads)
            n_stacks = min(len(b.stack_parent), len(b.stack_frame))
            n_frames = len(b.frames)
            self._frames_json.extend(
                json_text(frame_row(f)) for f in b.frames[len(self._frames_json) : n_frames]
            )
            self._stack_parent.extend(b.stack_parent[len(self._stack_parent) : n_stacks])
            self._stack_frame.extend(b.stack_frame[len(self._stack_frame) : n_stacks])
            tables = {
                "meta.json": dict(meta, format=FORMAT, version=VERSION, final=final),
                "threads.json": [thread_row(t) for t in b.threads[:n_threads]],
                "processes.json": [process_row(process)],
                "marks.json": [mark_row(m) for m in b.marks[self._first_mark :] if m.thread < n_threads],
                "counters.json": {k: _series(t, v) for k, (t, v) in counters.items()},
            }
            texts = {"frames.json": "[" + ",".join(self._frames_json) + "]"}
            texts.update((name, json_text(table)) for name, table in tables.items())
            columns = {"stack_parent": self._stack_parent, "stack_frame": self._stack_frame}
            columns.update(zip(SAMPLE_COLUMNS, self._columns))
            data = pack(texts, {name: _npy(column) for name, column in columns.items()}, compress=False)
            write_bytes(self.path, data, private=True)  # another user must not read a program's stacks
            self.written = n
        finally:
            self.lock.release()
        return time.thread_time() - start


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


def _running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has ended: it only waits to be reaped)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not os.path.isdir("/proc")


def wait_for_parts(directory: str, grace: float) -> list[str]:
    """Wait up to ``grace`` seconds for processes still running to write their final part.

    Returns the parts that are not final when the wait ends (their process was killed, or hangs).
    """
    deadline = time.monotonic() + grace
    while True:
        states = {path: _part_state(path) for path in part_files(directory)}
        partial = [path for path, (done, _) in states.items() if not done]
        if time.monotonic() >= deadline or not any(_running(states[path][1]) for path in partial):
            return partial
        time.sleep(0.05)
