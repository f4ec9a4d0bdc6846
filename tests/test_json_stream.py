"""The streaming JSON reader: the same values as json.loads whatever the chunk boundaries, precise
errors after many chunks, and memory that does not grow with the document."""

from __future__ import annotations

import gzip
import io
import json
import re
import tracemalloc

import pytest

from flameprof.collect.importers import json_stream
from flameprof.collect.importers.json_stream import JsonDefect, stream_member

# Events orjson's batches trip on (a "}," inside strings and nested objects, NaN, integers past 64
# bits, non-ASCII text that a chunk may cut in two), among plain ones.
TRICKY = [
    {"ph": "X", "name": "a},{b", "args": {"x": {"y": 1}, "z": "}, "}},
    {"ph": "X", "name": "caf\u00e9 \u2603 \U0001f600", "ts": 1.5},
    {"ph": "X", "big": 2**70, "neg": -(2**65)},
    {"ph": "X", "nested": [[{"a": [1, 2, {"b": "}"}]}]]},
    [1, 2, 3],
    "a string element",
    12345,
    None,
]


def _document(events: list, pretty: bool) -> bytes:
    doc = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 10**18}
    return json.dumps(doc, indent=1 if pretty else None, ensure_ascii=False).encode()


def _read(data: bytes, monkeypatch, chunk: int) -> tuple[list, dict]:
    monkeypatch.setattr(json_stream, "CHUNK", chunk)
    header: dict = {}
    return list(stream_member(io.BytesIO(data), "traceEvents", header)), header


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("pretty", [False, True])
def test_same_values_as_json_loads_whatever_the_chunks(monkeypatch, chunk, pretty):
    events = [{"ph": "X", "ts": i, "args": {"i": i}} for i in range(300)]
    events[5:5] = TRICKY
    events[200:200] = TRICKY
    data = _document(events, pretty)
    got, header = _read(data, monkeypatch, chunk)
    assert got == events
    assert header == {"schemaVersion": 1, "baseTimeNanoseconds": 10**18}


def test_nan_is_read_as_the_standard_library_does(monkeypatch):
    got, _ = _read(b'{"traceEvents": [{"ts": 1}, {"ts": NaN}, {"ts": 2}]}', monkeypatch, 16)
    assert got[0] == {"ts": 1} and got[2] == {"ts": 2} and got[1]["ts"] != got[1]["ts"]


def test_a_number_cut_by_a_chunk_is_read_whole(monkeypatch):
    got, header = _read(b'{"base": 1234567890123, "traceEvents": [5, 6789]}', monkeypatch, 3)
    assert got == [5, 6789] and header == {"base": 1234567890123}


@pytest.mark.parametrize(
    "tail, needle",
    [
        (b'{"ts": 1,}', None),  # json's own message: its wording changed in 3.13
        (b'{"ts": 1} {"ts": 2}', "expected ',' at line 2002 column 11"),
        (b'{"ts": "\xff"}', "not UTF-8 text at byte"),
        (b'{"ts": 1', "Expecting ',' delimiter at line 2003 column 1"),
    ],
)
def test_an_error_after_many_chunks_says_where(monkeypatch, tail, needle):
    data = b'{"traceEvents": [\n' + b'{"ph": "X", "ts": 1},\n' * 2000 + tail + b"\n]}"
    monkeypatch.setattr(json_stream, "CHUNK", 4096)
    with pytest.raises(JsonDefect, match=needle or re.escape(_json_says(data))):
        list(stream_member(io.BytesIO(data), "traceEvents", {}))


def _json_says(data: bytes) -> str:
    """What the standard json module says of ``data``'s defect, and where in the whole document."""
    try:
        json.loads(data)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    raise AssertionError("the document has no defect")


def test_a_huge_value_is_refused_without_reading_on(monkeypatch):
    monkeypatch.setattr(json_stream, "MAX_VALUE", 1 << 16)
    data = b'{"traceEvents": [' + b"[" * (1 << 20)
    with pytest.raises(JsonDefect, match="nested too deeply|more than"):
        list(stream_member(io.BytesIO(data), "traceEvents", {}))


def _peak_reading(size: int) -> tuple[int, int]:
    """(events read, peak traced bytes) streaming a gzipped trace of ``size`` bytes of JSON."""
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "args": {"x": 1}}
    line = json.dumps(event).encode() + b",\n"
    raw = b'{"traceEvents": [\n' + line * (size // len(line)) + json.dumps(event).encode() + b"]}"
    data = gzip.compress(raw, compresslevel=1)
    del raw
    tracemalloc.start()
    try:
        count = sum(1 for _ in stream_member(gzip.GzipFile(fileobj=io.BytesIO(data)), "traceEvents", {}))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_document():
    """Four times the document, the same peak: one batch's values at a time (the old reader held
    the bytes, the text and more)."""
    small_count, small = _peak_reading(10_000_000)
    big_count, big = _peak_reading(40_000_000)
    assert big_count > 3.9 * small_count
    assert big < 1.3 * small, f"peak {small / 1e6:.0f} MB for 10 MB of JSON, {big / 1e6:.0f} MB for 40 MB"
    assert big < 35_000_000  # one 1 MB batch decoded: its dicts take about 30 MB
