"""The readers' fuzzing harness, shared by tests/test_fuzz_readers.py (a short run in CI) and
scripts/fuzz_readers.py (a long local run): valid seed files of each input format, hypothesis
strategies that mutate them as a hostile or unlucky user would, and the promise every case must keep.

The promise: any bytes given to a command that reads a profile end in success, or in exactly one
stderr line ``flameprof: error: <file>: ...`` and exit 2; never a traceback, never a hang.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from kineto_traces import gpu_step
from synthetic import training_profile

from flameprof import cli
from flameprof.collect.importers.load import load_bytes
from flameprof.model import storage
from flameprof.render.speedscope import render_speedscope

DATA = os.path.join(os.path.dirname(__file__), "data", "import")
TIME_LIMIT = 5.0  # seconds per case; the promise is one second per megabyte, a loaded CI runner is slow
# What a number in the input becomes: out of range, negative, not finite, or of another type.
NUMBERS = (b"1e400", b"-1e400", b"9" * 30, b"-" + b"9" * 30, b"-1", b"NaN", b"0", b"1e-400", b"-0.0", b"2.5")
VALUES = (b'"x"', b"[]", b"{}", b"null", b"true", b"[[1, 2], [3]]")


def _read(name: str) -> bytes:
    with open(os.path.join(DATA, name), "rb") as fh:
        return fh.read()


def _flameprof_seed() -> bytes:
    return storage.dumps(training_profile({"data": 2, "encoder": 2, "head": 1, "backward": 2}, steps=3))


def _folded_seed() -> bytes:
    return (
        b"<module> (train.py:1);train (train.py:10);forward (model.py:5) 7\n"
        b"<module> (train.py:1);train (train.py:10);load_batch (data.py:3) 3\n"
        b"<module> (train.py:1);[libtorch_cpu.so];at::add 2.5\n"
    )


def _pyspy_seed() -> bytes:
    return _read("pyspy_subprocesses.txt")[:3000].rpartition(b"\n")[0] + b"\n"


def _speedscope_seed() -> bytes:
    profile = training_profile({"data": 1, "encoder": 2, "backward": 1}, steps=2)
    return render_speedscope(profile).encode()


def _perf_seed() -> bytes:
    return _read("perf_py312.txt")[:4000].rpartition(b"\n\n")[0] + b"\n\n"


def _kineto_seed() -> bytes:
    return json.dumps(gpu_step(), indent=0).encode()


def _traced_flameprof_seed() -> bytes:
    return storage.dumps(load_bytes(_kineto_seed(), "gpu.json"))


@dataclass(frozen=True)
class Reader:
    """One input format: a seed file, the commands that read it, and its structure-aware mutations."""

    name: str
    suffix: str
    seed: Callable[[], bytes]
    commands: tuple[tuple[str, ...], ...]  # argv with {in} and {out}


READERS = {
    r.name: r
    for r in (
        Reader(
            "flameprof",
            ".flameprof",
            _flameprof_seed,
            (
                ("report", "{in}"),
                ("report", "{in}", "--format", "json"),
                ("render", "{in}", "-o", "{out}.svg"),
                ("render", "{in}", "-o", "{out}.svg", "--view", "phases", "--format", "html,chrome,pprof"),
                ("check", "{in}", "--max", "data=90%"),
                ("diff", "{in}", "{in}", "-o", "{out}.svg"),
                ("merge", "{in}", "{in}", "-o", "{out}.flameprof"),
            ),
        ),
        Reader(
            "folded",
            ".folded",
            _folded_seed,
            (
                ("render", "{in}", "-o", "{out}.svg"),
                ("report", "{in}"),
                ("import", "{in}", "-o", "{out}.flameprof"),
            ),
        ),
        Reader(
            "pyspy",
            ".txt",
            _pyspy_seed,
            (("import", "{in}", "-o", "{out}.flameprof"), ("render", "{in}", "-o", "{out}.svg")),
        ),
        Reader(
            "speedscope",
            ".json",
            _speedscope_seed,
            (("import", "{in}", "-o", "{out}.flameprof"), ("render", "{in}", "-o", "{out}.svg")),
        ),
        Reader(
            "kineto",
            ".json",
            _kineto_seed,
            (
                ("import", "{in}", "-o", "{out}.flameprof"),
                ("report", "{in}", "--format", "json"),
                ("render", "{in}", "-o", "{out}.svg", "--view", "ops", "--format", "html,chrome"),
            ),
        ),
        Reader(
            "traced-flameprof",
            ".flameprof",
            _traced_flameprof_seed,
            (
                ("report", "{in}", "--format", "markdown"),
                ("render", "{in}", "-o", "{out}.svg", "--view", "ops", "--format", "html,chrome"),
                ("merge", "{in}", "{in}", "-o", "{out}.flameprof"),
            ),
        ),
        Reader(
            "perf",
            ".perf",
            _perf_seed,
            (
                ("collapse", "perf", "{in}"),
                ("import", "{in}", "-o", "{out}.flameprof"),
                ("render", "{in}", "-o", "{out}.svg"),
            ),
        ),
    )
}


# -- mutations ---------------------------------------------------------------------------------
def _truncate(data: bytes, at: int) -> bytes:
    return data[: at % (len(data) + 1)]


def _flip(data: bytes, at: int, bit: int) -> bytes:
    if not data:
        return data
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]


def _splice(data: bytes, at: int, cut: int, insert: bytes) -> bytes:
    i = at % (len(data) + 1)
    return data[:i] + insert + data[i + cut :]


def _number(data: bytes, which: int, number: bytes) -> bytes:
    """Replace the ``which``-th number in ``data`` by ``number``."""
    found = list(re.finditer(rb"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", data))
    if not found:
        return data + number
    m = found[which % len(found)]
    return data[: m.start()] + number + data[m.end() :]


def _repeat_line(data: bytes, which: int, times: int) -> bytes:
    """Repeat one line ``times`` times: long inputs, many continuation lines."""
    lines = data.split(b"\n")
    i = which % len(lines)
    return b"\n".join(lines[:i] + [lines[i]] * times + lines[i:])


def _deep(data: bytes, at: int, depth: int) -> bytes:
    i = at % (len(data) + 1)
    return data[:i] + b"[" * depth + b"1" + b"]" * depth + data[i:]


def _long_line(data: bytes, at: int, length: int) -> bytes:
    i = at % (len(data) + 1)
    return data[:i] + b"a;" * (length // 2) + data[i:]


def byte_mutation(data: bytes) -> st.SearchStrategy[bytes]:
    """One or a few generic mutations of ``data``."""
    pos = st.integers(0, 1 << 20)
    one = st.one_of(
        st.builds(_truncate, st.just(data), pos),
        st.builds(_flip, st.just(data), pos, st.integers(0, 7)),
        st.builds(_splice, st.just(data), pos, st.integers(0, 16), st.binary(max_size=16)),
        st.builds(_number, st.just(data), pos, st.sampled_from(NUMBERS + VALUES)),
        st.builds(_repeat_line, st.just(data), pos, st.sampled_from((2, 100, 20_000))),
        st.builds(_deep, st.just(data), pos, st.sampled_from((50, 1000, 10_000))),
        st.builds(_long_line, st.just(data), pos, st.sampled_from((1000, 100_000))),
    )
    return one | one.flatmap(byte_mutation_again)


def byte_mutation_again(data: bytes) -> st.SearchStrategy[bytes]:
    """A second mutation on top of a first, without recursing further."""
    pos = st.integers(0, 1 << 20)
    return st.one_of(
        st.builds(_truncate, st.just(data), pos),
        st.builds(_flip, st.just(data), pos, st.integers(0, 7)),
        st.builds(_number, st.just(data), pos, st.sampled_from(NUMBERS + VALUES)),
    )


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _repack(members: dict[str, bytes], compress: bool) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buf.getvalue()


NPY_HEADERS = (
    b"{'descr': '<i4', 'fortran_order': False, 'shape': (1000000000000,), }",
    b"{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }",
    b"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }",
    b"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
    b"{'descr': '<U9', 'fortran_order': False, 'shape': (1,), }",
    b"{'descr': '<i4', 'fortran_order': True, 'shape': (), }",
    b"{'descr': \"\"\"'",
    b"((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((",
)


# A value put into a column (None: its last index): in range, just out of range, extreme.
COLUMN_VALUES = (0, 1, -1, -2, None, 2**31 - 1, -(2**31), 10**15)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _npy_header(content: bytes, header: bytes) -> bytes:
    header = header + b" " * (-(len(header) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + content[128:]


@st.composite
def zip_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """Mutate one member of a ``.flameprof`` zip (its text, its numbers, its ``.npy`` header, its
    shape), drop or duplicate members, or corrupt the zip's own structure."""
    members = _members(data)
    names = sorted(members)
    name = draw(st.sampled_from(names))
    content = members[name]
    kind = draw(
        st.sampled_from(("member", "member", "values", "values", "npy", "reshape", "drop", "structure"))
    )
    if kind == "member":
        members[name] = draw(byte_mutation(content))
    elif kind == "npy" and name.endswith(".npy"):
        members[name] = _npy_header(content, draw(st.sampled_from(NPY_HEADERS)))
    elif kind == "values" and name.endswith(".npy"):
        array = np.load(io.BytesIO(content), allow_pickle=False).astype(np.int64)
        if len(array):
            value = draw(st.sampled_from(COLUMN_VALUES))
            array[draw(st.integers(0, len(array) - 1))] = len(array) - 1 if value is None else value
        members[name] = _npy(array)
    elif kind == "reshape" and name.endswith(".npy"):
        array = np.load(io.BytesIO(content), allow_pickle=False)
        members[name] = _npy(np.repeat(array, 2).reshape(-1, 2) if draw(st.booleans()) else array[:-1])
    elif kind == "drop":
        del members[name]
    zipped = _repack(members, draw(st.booleans()))
    if kind == "structure":
        zipped = draw(byte_mutation(zipped))
    return zipped


def mutations(reader: Reader) -> st.SearchStrategy[bytes]:
    seed = reader.seed()
    if reader.suffix == ".flameprof":  # mostly inside the zip: a mangled zip is refused at once
        inside, whole = zip_mutation(seed), byte_mutation(seed)
        return st.integers(0, 7).flatmap(lambda k: whole if k == 0 else inside)
    return byte_mutation(seed)


# -- the promise ---------------------------------------------------------------------------------
class Hang(Exception):
    """A case ran past TIME_LIMIT."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(_signum, _frame):
        raise Hang(f"over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    code: int
    stdout: bytes
    stderr: str
    seconds: float


def run_cli(argv: list[str], limit: float = TIME_LIMIT) -> Outcome:
    """``flameprof ARGV`` in this process: its exit code, output and time. An exception that escapes
    ``cli.main`` (a traceback for the user) or a run past ``limit`` propagates."""
    out, err = io.BytesIO(), io.StringIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    start = time.perf_counter()
    with time_limit(limit), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def check_case(reader: Reader, data: bytes, command: tuple[str, ...], workdir: str) -> Outcome:
    """Run ``command`` on ``data``; raise AssertionError when the outcome breaks the promise."""
    path = os.path.join(workdir, "input" + reader.suffix)
    with open(path, "wb") as fh:
        fh.write(data)
    argv = [a.format(**{"in": path, "out": os.path.join(workdir, "out")}) for a in command]
    outcome = run_cli(argv)
    if outcome.code not in (0, 1) or "error" in outcome.stderr:
        lines = outcome.stderr.splitlines()
        assert outcome.code == 2, (outcome.code, outcome.stderr)
        assert len(lines) == 1, outcome.stderr
        assert lines[0].startswith(f"flameprof: error: {path}"), lines[0]
    else:  # success, or the CI gate's "a budget broke"; a library warning would mean garbage numbers
        assert outcome.code == 0 or command[0] == "check", outcome
        assert all(line.startswith("flameprof: ") for line in outcome.stderr.splitlines()), outcome.stderr
    return outcome
