"""The C collapser (flameprof._perf) gives exactly what the Python reader gives, on any perf script text
and any chunking: it reads the regular samples and hands every other block back to the Python reader."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flameprof.collect.importers import perf_script
from flameprof.collect.importers.perf_script import CollapseOptions, collapse_perf

pytest.importorskip("flameprof._perf")

DATA = os.path.join(os.path.dirname(__file__), "data", "import")

COMMS = ["python3", "java", "pt worker", "V8 WorkerThread", "a", "java2", "x:y"]
EVENTS = [
    ":    1001001 cpu-clock:ppp: ",
    ": 5 cycles: ",
    ": cycles: ",
    ":          0 cpu-clock:ppp: ",
    ": 00 cycles:",
    ": 123456789012345678901234 cycles: ",
    ": instructions: \t",
    " no event here",
    ":12 x: y:",
]
SYMBOLS = [
    "func",
    "func+0x1f",
    "at::native::add(at::Tensor const&)+0x40",
    "(anonymous namespace)::k<float>+0x2",
    "ns::(anonymous namespace)::k(int)",
    "net/http.(*Client).Do+0x9",
    "inner->outer+0x3",
    "[unknown]",
    '"quoted;name"+0x2',
    "Lorg/example/Foo;.bar(I)V+0x4",
    "py::forward:/srv/app/model.py+0x5",
    "",
    "sym with spaces (x) tail",
    "f+0xZZ",
    "_[j]already+0x1",
]
MODULES = [
    "/usr/lib/libc.so.6",
    "[kernel.kallsyms]",
    "/boot/vmlinux",
    "[unknown]",
    "/tmp/perf-4242.map",
    "[unknown-mod]",
    "inlined",
    "a (b)",
]
ODD = ["# a comment", "", "not a frame line", "\t", "   7f (", "\tx y (m)\r", "\t1 a (b) (c)"]


@st.composite
def perf_text(draw) -> bytes:
    """Samples mostly of the usual shape, with odd lines and blank-line runs mixed in."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        comm = draw(st.sampled_from(COMMS))
        ids = draw(st.sampled_from(["4242", "4242/4250", "4242/0", "77/78", "12"]))
        out.append(f"{comm} {ids} [001] 100.000100{draw(st.sampled_from(EVENTS))}")
        for _ in range(draw(st.integers(0, 6))):
            if draw(st.integers(0, 9)) == 0:
                out.append(draw(st.sampled_from(ODD)))
                continue
            sym, mod = draw(st.sampled_from(SYMBOLS)), draw(st.sampled_from(MODULES))
            out.append(f"\t{draw(st.sampled_from(['7f00', 'ffffffff81', '0', 'zz']))} {sym} ({mod})")
        out.append("" if draw(st.integers(0, 5)) else "\n")
        out.append("")
    return "\n".join(out).encode()


def collapse_both(data: bytes, chunk: int, options: CollapseOptions, capsys) -> None:
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    expected = collapse_perf(chunks, options, native=False)
    python_err = capsys.readouterr().err
    assert collapse_perf(chunks, options) == expected
    assert capsys.readouterr().err == python_err


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    data=perf_text(),
    chunk=st.sampled_from([1, 7, 64, 1000, 1 << 20]),
    flags=st.tuples(*[st.booleans()] * 5),
    event_filter=st.sampled_from([b"", b"cycles", b"cpu-clock:ppp"]),
)
def test_the_c_reader_agrees_with_the_python_reader(data, chunk, flags, event_filter, capsys):
    pid, tid, kernel, jit, addrs = flags
    options = CollapseOptions(pid, tid, kernel, jit, addrs, event_filter)
    collapse_both(data, chunk, options, capsys)


def test_a_real_recording_is_read_by_the_c_reader(monkeypatch, capsys):
    with open(os.path.join(DATA, "perf_py312.txt"), "rb") as fh:
        data = fh.read() + b"\n"
    collapse_both(data, 1 << 20, CollapseOptions(), capsys)
    fed = []
    real = perf_script._native_collapser

    class Counting:
        def __init__(self, parser, out):
            self.collapser = real(parser, out)
            assert self.collapser is not None

        def feed(self, data, start, event_filter):
            result = self.collapser.feed(data, start, event_filter)
            fed.append(result)
            return result

        def flush(self):
            self.collapser.flush()

    monkeypatch.setattr(perf_script, "_native_collapser", Counting)
    assert collapse_perf([data]) == collapse_perf([data], native=False)
    assert sum(lines for _end, lines, _declined in fed) > 0.9 * data.count(b"\n")


def test_periods_summed_past_64_bits_are_exact(capsys):
    """The C reader sums a stack's periods in 64 bits until flushed; a sum that would overflow goes
    to the output first. Periods past 19 digits read as 10**19, as the Python reader reads them."""
    sample = b"python3 4242 [001] 100.000100: %s cycles:\n\t7f00 main (/usr/bin/python3)\n\n"
    periods = [b"9" * 19, b"9" * 25, b"1", b"0"] * 3  # 0 counts as 1, as a missing period does
    data = b"".join(sample % p for p in periods)
    collapse_both(data, 1 << 20, CollapseOptions(), capsys)
    [(stack, total)] = collapse_perf([data]).items()
    assert stack == b"python3;main" and total == 3 * (10**19 - 1 + 10**19 + 1 + 1) > 2**64
