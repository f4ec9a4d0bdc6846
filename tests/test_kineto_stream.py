"""The streaming Kineto reader: the C Scanner and walks (native/kineto.c) give exactly what the
Python reader gives, wherever the buffers cut the trace and whatever odd fields its events hold;
hostile or broken traces end in one error line; memory stays a fraction of the trace."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc
import zipfile
from copy import deepcopy

import numpy as np
import pytest
from conftest import assert_one_error_line, run_flameprof
from kineto_traces import comm_steps, ddp_step, gpu_step

from flameprof.collect.importers import json_stream, kineto, kineto_profile
from flameprof.collect.importers.kineto import decode_document, read_trace
from flameprof.collect.importers.kineto_profile import read_kineto
from flameprof.collect.importers.load import load_input
from flameprof.model import storage
from flameprof.model.trace import DEVICE_KINDS, EVENT_COLUMNS, MEMORY_COLUMNS, nesting_order

native = pytest.importorskip("flameprof._kineto", reason="the C reader is not built")


def _x(
    name: object, ts: object, dur: object = 10, cat: object = "cpu_op", tid: object = 1, **args: object
) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


# Events the Scanner leaves to Python (each with the field that makes it so), among plain ones.
ODD = [
    _x("aten::mm", 100),
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": "7", "tid": 1, "ts": 101, "dur": 1},
    _x("aten::add", 102, 1, correlation=3.0),  # a float correlation id: Python's _int says -1
    _x("aten::sub", 103, 1, **{"Sequence number": 2**70}),  # past 62 bits: -1
    {"ph": "X", "cat": "cpu_op", "name": "aten::div", "ts": 105, "dur": 1, "args": {"Sequence number": True}},
    _x(12345, 106, 1),  # a number for a name: str() of it
    _x("caf\u00e9 \u2603 \U0001f600", 107, 1),  # non-ASCII, and a surrogate pair when escaped
    _x('quote " brace }, bracket ] [ {"ph": "X"}', 108, 1),
    _x("aten::mul", "109", 1),  # a string time: _number reads it
    {"ph": "X", "cat": "CPU_OP", "name": "upper-case category", "pid": 7, "tid": 1, "ts": 111, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "args not an object", "pid": 7, "tid": 1, "ts": 112, "args": [1]},
    {"ph": "X", "cat": "python_function", "name": "frame.py(1): f", "pid": 7, "tid": 1, "ts": 113, "dur": 1},
    {
        "ph": "X",
        "cat": "python_function",
        "name": "nn.Module: Linear_0",
        "pid": 7,
        "tid": 1,
        "ts": 113,
        "dur": 5,
    },
    {"ph": "X", "cat": "python_function", "name": "frame.py(2): g", "pid": 7, "tid": 1, "ts": "bad"},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 1, "ts": 114, "args": None},
    {"ph": "i", "name": "[memory]", "pid": 7, "tid": 1, "ts": 115, "args": {"Bytes": "64", "Device Type": 1}},
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 9,
        "ts": 116,
        "dur": 2,
        "args": {"bytes": None},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": "x",
        "tid": 9,
        "ts": 117,
        "dur": 2,
        "args": {"device": 1},
    },
    {"ph": 88, "cat": "cpu_op", "name": "ph not a string", "ts": 118},
    {"ph": "X", "cat": "cpu_op", "name": "deep", "ts": 119, "dur": 1, "args": {"x": [[[[[[[[[[1]]]]]]]]]]}},
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::addmm",
        "pid": 7,
        "tid": 1,
        "ts": 120,
        "dur": 4,
        "args": {
            "Input Dims": [[16], [8, 32], [32, 16], [], []],
            "Concrete Inputs": ["", "", "", "1", "1"],
            "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
        },
    },
    # dtypes Python reads (a string pid), and dtypes that are not a list of strings: none kept
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": "7",
        "tid": 1,
        "ts": 121,
        "dur": 1,
        "args": {"Input Dims": [[8, 8], [8, 8]], "Input type": ["c10::Half", "c10::Half"]},
    },
    _x("aten::mm", 122, 1, **{"Input Dims": [[8, 8], [8, 8]], "Input type": "float"}),
    _x("aten::mm", 123, 1, **{"Input type": ["float", 3]}),
    {"ph": "X", "cat": "cpu_op", "name": "", "pid": 7, "tid": 1, "ts": 130, "dur": 1},
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "big ints",
        "pid": 123456789012345678,
        "tid": -5,
        "ts": 131,
        "dur": 1,
    },
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "floats",
        "pid": 7,
        "tid": 1,
        "ts": 132.000000000000001,
        "dur": 1e-7,
    },
    {"ph": "X", "cat": "cpu_op", "name": "exponents", "pid": 7, "tid": 1, "ts": 1.33e2, "dur": 25e-1},
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "many digits",
        "pid": 7,
        "tid": 1,
        "ts": 134.12345678901234567,
        "dur": 0,
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 7,
        "tid": 1,
        "ts": 135,
        "dur": 1,
        "args": {"External id": 40},
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 7,
        "tid": 1,
        "ts": 136,
        "dur": 1,
        "args": {"External id": 41, "correlation": 42},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "launched",
        "pid": 0,
        "tid": 9,
        "ts": 137,
        "dur": 1,
        "args": {"correlation": 42, "stream": 3, "device": 0, "bytes": 12.5},
    },
]


def _odd_trace(copies: int = 3) -> dict:
    events = []
    for copy in range(copies):
        for doc in (gpu_step(), ddp_step(), comm_steps()):
            for event in doc["traceEvents"]:
                if isinstance(event.get("ts"), (int, float)):
                    event = dict(event, ts=event["ts"] + copy * 5000)
                events.append(event)
        events.extend(ODD)
    return {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": events}


def _read(data: bytes, monkeypatch, chunk: int, c: bool):
    monkeypatch.setattr(json_stream, "CHUNK", chunk)
    if not c:
        monkeypatch.setattr(kineto, "scanner", lambda: None)
        monkeypatch.setattr(kineto, "_native", lambda: None)
        monkeypatch.setattr(kineto_profile, "_native", lambda: None)
    profile = read_kineto(data, "t.json")
    monkeypatch.undo()
    return profile


def _same(a, b) -> None:
    ta, tb = a.trace, b.trace
    assert ta.names == tb.names and ta.steps == tb.steps
    for key in EVENT_COLUMNS:
        np.testing.assert_array_equal(ta.events[key], tb.events[key], err_msg=key)
    for key in MEMORY_COLUMNS:
        np.testing.assert_array_equal(ta.memory[key], tb.memory[key], err_msg=key)
    assert a.frames == b.frames and a.threads == b.threads and a.processes == b.processes
    for key in ("stack_parent", "stack_frame", "sample_time", "sample_thread", "sample_stack", "sample_wall"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    assert a.marks == b.marks and a.meta == b.meta


@pytest.mark.parametrize("pretty", [False, True])
def test_the_scanner_reads_as_python_does_wherever_the_buffers_cut(monkeypatch, pretty):
    data = json.dumps(_odd_trace(), indent=1 if pretty else None).encode()
    expected = _read(data, monkeypatch, 1 << 20, c=False)
    names = set(expected.trace.names)
    assert {"12345", "caf\u00e9 \u2603 \U0001f600", 'quote " brace }, bracket ] [ {"ph": "X"}', ""} <= names
    assert "Linear_0" in names and not any(n.startswith("frame.py") for n in names)
    assert "[[16],[8,32],[32,16],[],[]]" in names
    trace = expected.trace
    typed = trace.events["types"] >= 0  # "float" and ["float", 3] are no dtypes
    assert {trace.names[n] for n in trace.events["types"][typed]} == {
        '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]',
        '["c10::Half","c10::Half"]',
    }
    assert {trace.names[n] for n in trace.events["name"][typed]} == {"aten::addmm", "aten::mm"}
    for chunk in (1 << 20, 4096, 97, 7):
        _same(_read(data, monkeypatch, chunk, c=True), expected)


def test_escaped_text_reads_the_same_through_either_reader(monkeypatch):
    doc = _odd_trace(1)
    data = json.dumps(doc, ensure_ascii=True).encode()  # \\u escapes, surrogate pairs
    assert b"\\ud83d" in data
    _same(_read(data, monkeypatch, 64, c=True), _read(data, monkeypatch, 1 << 20, c=False))


# Spellings no Python dict can make: duplicate keys (the last counts), a key and a category spelled
# with escapes, one value spelled two ways (one shapes text), a number with a leading minus zero.
RAW = b"""{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "first", "name": "second", "pid": 7, "tid": 1, "ts": 1, "dur": 9},
 {"ph": "X", "cat": "cpu_op", "na\\u006de": "escaped", "pid": 7, "tid": 1, "ts": 2, "dur": 1},
 {"ph": "X", "cat": "cpu_\\u006fp", "name": "escaped category", "pid": 7, "tid": 1, "ts": 3, "dur": 1},
 {"ph": "\\u0058", "cat": "cpu_op", "name": "escaped ph", "pid": 7, "tid": 1, "ts": 4, "dur": 1},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": -0, "tid": 1, "ts": -0, "dur": 1,
  "args": {"Input Dims": [[2, 3], [3, 4]], "args": {"Input Dims": 5}}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": 5, "dur": 1,
  "args": {"Input Dims": [ [2,3] ,[3,4]]}},
 {"ph":"X","cat":"cpu_op","name":"tight","pid":7,"tid":1,"ts":6,"dur":1,"args":{"Sequence number":-12}},
 {"ph": "X", "cat": "cpu_op", "name": "args twice", "ts": 7, "dur": 1, "args": {"x": 1}, "args": {}}
]}"""


@pytest.mark.parametrize("chunk", [1 << 20, 13])
def test_spellings_no_dict_makes_read_as_python_reads_them(monkeypatch, chunk):
    expected = _read(RAW, monkeypatch, 1 << 20, c=False)
    names = set(expected.trace.names)
    assert {"second", "escaped", "escaped category", "escaped ph", "[[2,3],[3,4]]"} <= names
    assert "first" not in names
    _same(_read(RAW, monkeypatch, chunk, c=True), expected)


def test_the_scanner_leaves_only_the_odd_elements_to_python(monkeypatch):
    plain = gpu_step()["traceEvents"] * 50
    data = json.dumps({"traceEvents": plain + ODD + plain}).encode()
    left = []
    original = kineto_profile.read_trace

    def counting(doc, source, epoch=None):
        events = doc.events

        def spy(scan=None):
            for event in events(scan):
                left.append(event)
                yield event

        doc.events = spy
        return original(doc, source, epoch)

    monkeypatch.setattr(kineto_profile, "read_trace", counting)
    read_kineto(data, "t.json")
    assert 0 < len(left) <= len(ODD)
    assert all(event in ODD for event in left)


def test_gzip_reads_as_plain(tmp_path):
    doc = _odd_trace(2)
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps(doc))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, packed):
        proc = run_flameprof("report", "--format", "json", str(path))
        assert proc.returncode == 0, proc.stderr
    reports = [
        run_flameprof("report", "--format", "json", str(p)).stdout.replace(str(p), "T")
        for p in (plain, packed)
    ]
    assert reports[0] == reports[1]


def test_a_truncated_gzip_is_one_error_line(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_odd_trace(2)).encode())[:-50])
    proc = run_flameprof("import", str(path), "-o", str(tmp_path / "x.flameprof"))
    assert_one_error_line(proc, "corrupt or truncated gzip data")
    assert proc.returncode == 2


def test_an_event_named_with_the_empty_string_has_that_name(tmp_path):
    events = [_x("", 0, 10), _x("aten::mm", 1, 5)]
    profile = read_kineto(json.dumps({"traceEvents": events}).encode(), "t.json")
    assert profile.trace.names[profile.trace.events["name"][0]] == ""
    assert sorted(f.name for f in profile.frames) == ["", "aten::mm"]


def test_the_walks_in_c_match_their_python_loops(monkeypatch):
    """Nesting, attribution and stacks of a trace with layers, modules inside layers, backward on
    an engine thread, a recomputed forward and overhanging children: C and Python agree."""
    events = []
    for step in range(40):
        t = step * 1000
        events += [
            _x(f"ProfilerStep#{step}", t, 900, cat="user_annotation"),
            _x("flameprof.layer: Net.0", t + 10, 300, cat="user_annotation"),
            {
                "ph": "X",
                "cat": "python_function",
                "name": "nn.Module: Inner",
                "pid": 7,
                "tid": 1,
                "ts": t + 20,
                "dur": 200,
            },
            _x("aten::linear", t + 30, 100, **{"Sequence number": step}),
            _x("aten::mm", t + 30, 100.0005, **{"Sequence number": step}),  # overhangs its parent
            _x(
                f"autograd::engine::evaluate_function: MmBackward{step % 3}",
                t + 400,
                100,
                tid=2,
                **{"Sequence number": step},
            ),
            _x("## forward ##", t + 420, 50, cat="user_annotation", tid=2),
            _x("aten::mm", t + 425, 10, tid=2, **{"Sequence number": 1000 + step}),
            _x("cudaDeviceSynchronize", t + 600, 50, cat="cuda_runtime"),
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 7,
                "tid": 1,
                "ts": t + 30,
                "args": {"Bytes": 8, "Total Allocated": step},
            },
        ]
    data = json.dumps({"traceEvents": events}).encode()
    _same(_read(data, monkeypatch, 1 << 20, c=True), _read(data, monkeypatch, 1 << 20, c=False))
    trace = read_trace(decode_document(data, "t.json"), "t.json")[0]
    layers = {trace.name_of(i) for i in trace.events["layer"].tolist()}
    assert {"Net.0", "Net.0.Inner"} <= layers


def test_memory_stays_near_what_the_trace_becomes():
    """A trace of 6 MB read and its profile made: neither the text nor the events are ever held as
    Python objects; the peak is about the columns the trace and profile keep (the reader before
    the Scanner peaked at 4.6 times the file, as measured by scripts/bench_kineto_import.py)."""
    events = gpu_step()["traceEvents"]
    step = max(e.get("ts", 0) + e.get("dur", 0) for e in events) + 100
    copies = [dict(e, ts=e["ts"] + k * step) if "ts" in e else e for k in range(1500) for e in events]
    data = json.dumps({"traceEvents": copies}).encode()
    tracemalloc.start()
    try:
        profile = read_kineto(data, "t.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert profile.trace.num_events > 30_000
    kept = sum(c.nbytes for c in (*profile.trace.events.values(), profile.sample_time, profile.sample_wall))
    assert peak < 1.5 * len(data), f"peak {peak / 1e6:.1f} MB for {len(data) / 1e6:.1f} MB of JSON"
    assert peak < 3 * kept, f"peak {peak / 1e6:.1f} MB for {kept / 1e6:.1f} MB of columns kept"


def test_a_stream_is_never_read_whole(tmp_path, monkeypatch):
    """The import reads the file a chunk at a time (it used to read it whole first)."""
    reads = []

    class Counting(io.BytesIO):
        def read(self, size=-1):
            reads.append(size)
            return super().read(size)

    data = json.dumps(_odd_trace(3)).encode()
    doc = decode_document(data, "t.json")
    doc.stream = Counting(data)
    monkeypatch.setattr(json_stream, "CHUNK", 4096)
    read_trace(doc, "t.json")
    assert reads and all(0 < size <= 4096 for size in reads)


@pytest.mark.parametrize("seed", range(4))
def test_nesting_order_is_a_lexsort_by_start_then_longer_first(seed):
    """Events by start, the longer first at equal starts, reading order among equals: the sort the
    reader's walks and the idle attribution read a trace in, done without a lexsort of it all."""
    rng = np.random.default_rng(seed)
    n = 5000
    start = np.round(np.sort(rng.uniform(0, 100, n)) + rng.normal(0, 2, n), 0)  # near order, many ties
    dur = rng.integers(0, 4, n).astype(float)  # equal (start, dur) pairs too
    order = nesting_order(start, dur)
    assert (order == np.lexsort((-dur, start))).all()
    assert len(np.unique(start)) < n / 2 and (np.diff(start) < 0).any()  # ties, and out of order


def test_the_import_writes_each_trace_column_before_the_samples_exist(tmp_path, monkeypatch):
    """``flameprof import`` of a trace writes each of its columns to the file as it is made and
    makes the samples afterwards from the host events' columns alone (the trace's columns and its
    samples were held together at the end: 0.33x the JSON of a 2 GB trace), and the file is the
    one a profile read whole and saved makes, member for member."""
    data = json.dumps(_odd_trace(3)).encode()
    trace_file, streamed, saved = (
        tmp_path / "t.json",
        tmp_path / "streamed.flameprof",
        tmp_path / "saved.flameprof",
    )
    trace_file.write_bytes(data)
    written: list[str] = []
    column, samples = storage.ProfileWriter.column, kineto_profile.profile_of_hosts
    monkeypatch.setattr(
        storage.ProfileWriter,
        "column",
        lambda self, name, *parts: (written.append(name), column(self, name, *parts)),
    )
    monkeypatch.setattr(
        kineto_profile, "profile_of_hosts", lambda *args: (written.append("samples"), samples(*args))[1]
    )
    profile = load_input(str(trace_file), output=str(streamed))
    monkeypatch.undo()
    assert written.index("samples") == len(EVENT_COLUMNS) + len(MEMORY_COLUMNS)
    assert profile.trace is None and profile.num_samples > 0
    storage.save(read_kineto(data, str(trace_file)), saved)
    with zipfile.ZipFile(streamed) as a, zipfile.ZipFile(saved) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        for name in a.namelist():
            assert a.read(name) == b.read(name), name


def test_correlation_ids_past_32_bits_link_kernels_as_small_ones_do():
    """Sequence numbers and correlation ids are held in 32 bits only when every one fits: a trace
    whose second step's ids are its first's plus 2**32 still ties each kernel to the runtime call
    that launched it (in 32 bits the first step's kernels would take the second step's calls)."""
    events = gpu_step()["traceEvents"]
    step = max(e.get("ts", 0) + e.get("dur", 0) for e in events) + 100
    second = deepcopy(events)
    for event in second:
        event["ts"] = event.get("ts", 0) + step
        args = event.get("args", {})
        for key in ("correlation", "External id", "Sequence number"):
            if isinstance(args.get(key), int) and args[key] >= 0:
                args[key] += 1 << 32
    one = read_trace(decode_document(json.dumps({"traceEvents": events}).encode(), "t.json"), "t.json")[0]
    both = read_trace(
        decode_document(json.dumps({"traceEvents": events + second}).encode(), "t.json"), "t.json"
    )[0]
    ev = both.events
    device = np.flatnonzero(np.isin(ev["kind"], DEVICE_KINDS))
    linked = device[ev["parent"][device] >= 0]
    launched_one = int((one.events["parent"][np.isin(one.events["kind"], DEVICE_KINDS)] >= 0).sum())
    assert launched_one > 0 and len(linked) == 2 * launched_one
    launch = ev["parent"][linked]
    assert (ev["start"][launch] <= ev["start"][linked]).all()  # each kernel after its own launch
    assert (ev["start"][linked] - ev["start"][launch] < step / 1e6).all()  # in its own step


def test_a_trace_of_no_host_event_leaves_no_file(tmp_path):
    """The import refuses a trace with nothing to sample in one error line, and the file it was
    writing as it read is not left behind."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {}}
    path, out = tmp_path / "t.json", tmp_path / "out.flameprof"
    path.write_text(json.dumps({"traceEvents": [kernel]}))
    assert_one_error_line(run_flameprof("import", str(path), "-o", str(out)), "no stacks found")
    assert not out.exists() and list(tmp_path.iterdir()) == [path]
