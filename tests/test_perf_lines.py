"""The linear perf script matchers give exactly what stackcollapse-perf.pl's patterns give, on any line,
and stay linear where those patterns backtrack for minutes."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flameprof.collect.importers import perf_lines

# The patterns as stackcollapse-perf.pl writes them: the oracle, on lines short enough for them.
HEADER = re.compile(rb"(\S.+?)\s+(\d+)/*(\d+)*\s+")
EVENT = re.compile(rb":\s*(\d+)*\s+(\S+):\s*$")
FRAME = re.compile(rb"\s*(\w+)\s*(.+) \((.*)\)")
GO_METHOD = re.compile(rb"\.\(.*\)\.")
BRACKETED = re.compile(rb"\[.*?\]")
PERF_FRAME = re.compile(rb"[ \t]+[0-9a-fA-F]+ .* \(.*\)\r?$")

# Lines made of the characters these patterns care about.
ALPHABET = b" \t\r\x0b1/a:()[].+x_f"
lines = st.binary(max_size=24).map(lambda b: bytes(ALPHABET[c % len(ALPHABET)] for c in b))


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(lines)
def test_matchers_agree_with_the_perl_patterns(line):
    m = HEADER.match(line)
    h = perf_lines.header(line)
    assert (None if m is None else (*m.groups(), m.end(2))) == (None if h is None else tuple(h))
    m = EVENT.search(line)
    e = perf_lines.EVENT.search(line)
    assert (None if m is None else m.groups()) == (None if e is None else e.groups())
    m = FRAME.match(line)
    assert (None if m is None else m.groups()) == perf_lines.frame(line)
    assert bool(GO_METHOD.search(line)) == perf_lines.is_go_method(line)
    assert BRACKETED.sub(b"", line) == perf_lines.without_brackets(line)
    assert bool(PERF_FRAME.match(line)) == perf_lines.looks_like_frame(line)


HOSTILE = [
    b"python3 4242/4242 [001] 100.000100: " + b"1" * 30 + b" cpu-clock:ppp x",  # the 90 bytes
    b"a" + b" " * 200_000 + b"x",
    b"a 1/" + b"1" * 200_000 + b"x",
    b": " + b" " * 200_000 + b"x",
    b"\t1 f" + b" (" * 200_000,
    b"\t" + b"a" * 200_000 + b" x",
    b"\t1 " + b" (" * 200_000 + b"\r",
    b"[" * 400_000,
    b".(" * 200_000,
]


@pytest.mark.parametrize("line", HOSTILE, ids=range(len(HOSTILE)))
def test_matchers_are_linear_on_hostile_lines(line):
    start = time.perf_counter()
    perf_lines.header(line)
    perf_lines.EVENT.search(line)
    perf_lines.frame(line)
    perf_lines.is_go_method(line)
    perf_lines.without_brackets(line)
    perf_lines.looks_like_frame(line)
    assert time.perf_counter() - start < 1.0
