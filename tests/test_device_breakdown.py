"""The device's time as Holistic Trace Analysis reads a GPU trace, computed by flameprof and by HTA
itself on the same trace; communication in the verdict; kernel statistics; the interval arithmetic."""

from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import asdict

import numpy as np
import pytest
from conftest import run_flameprof
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_traces import ALL_REDUCE, COMM_STREAM, GEMM, ORPHAN, RELU_US, STREAM, comm_steps

from flameprof.analyze import intervals
from flameprof.analyze.device_breakdown import (
    COMMUNICATION,
    COMPUTATION,
    MEMORY,
    OTHER,
    collective_name,
    device_times,
    kernel_type,
)
from flameprof.analyze.ops import ops_report
from flameprof.collect.importers.kineto import decode_document, read_trace
from flameprof.collect.importers.kineto_profile import read_kineto


def _trace(document: dict):
    data = json.dumps(document).encode()
    return read_trace(decode_document(data, "t.json"), "t.json")[0]


def test_kernel_types_follow_the_names_as_hta_classifies_them():
    assert kernel_type(ALL_REDUCE) == COMMUNICATION
    assert kernel_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == COMMUNICATION
    assert kernel_type("Memcpy HtoD (Pageable -> Device)") == MEMORY
    assert kernel_type("Memset (Device)") == MEMORY
    assert kernel_type(GEMM) == COMPUTATION
    assert kernel_type("Event Sync") == OTHER  # a wait, named for a sync: not computation
    assert collective_name(ALL_REDUCE) == "AllReduce"
    assert collective_name(GEMM) == GEMM


def test_the_breakdown_of_a_data_parallel_step_by_hand():
    """Steps 0 and 1 count (the last step's work may be cut off by the trace's end). Stream 7 and
    the all_reduce cover [100, 800) and [870, 900) of each, the orphan [950, 960) of step 0."""
    device = device_times(_trace(comm_steps()))[0]
    assert device.span == pytest.approx(1800e-6)
    assert device.idle == pytest.approx((1800 - 740 - 730) * 1e-6)
    computation = 2 * (300 + 30) + RELU_US[0] + RELU_US[1] + 10  # + the orphan
    assert device.computation == pytest.approx(computation * 1e-6)
    assert device.communication == pytest.approx(1000e-6)
    # exposed: the all_reduce [300, 800) less the GEMM [100, 400) and the ReLU from 430
    assert device.exposed_communication == pytest.approx((1000 - 200 - RELU_US[0] - RELU_US[1]) * 1e-6)
    assert device.collective == "AllReduce"
    streams = {s.stream: s for s in device.streams}
    assert set(streams) == {STREAM, COMM_STREAM}
    compute = streams[STREAM]
    # stream 7 in order: GEMM, copy (0 us after), ReLU (10 us), update (launched after the ReLU
    # ended: the host's wait), the orphan (launch unknown: other), then step 1's GEMM (launched
    # after the orphan ended)
    assert compute.kernel_wait == pytest.approx(10e-6 * 2)
    assert compute.host_wait == pytest.approx(
        (870 - 430 - RELU_US[0] + 1100 - 960 + 870 - 430 - RELU_US[1]) * 1e-6
    )
    assert compute.other == pytest.approx(50e-6)
    assert streams[COMM_STREAM].host_wait == pytest.approx(500e-6)


def test_the_breakdown_agrees_with_holistic_trace_analysis(tmp_path):
    pytest.importorskip("hta")  # a test dependency of the main environment, not of the other Pythons'
    from hta_figures import differences, flameprof_figures, hta_figures

    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(comm_steps()).encode()))
    theirs = hta_figures(str(path))
    # HTA leaves out a device event whose runtime call the trace lacks: read as it does, every
    # figure is HTA's within a point
    same_events = differences(flameprof_figures(str(path), launched_only=True), theirs)
    assert max(abs(v) for v in same_events.values()) < 1.0, same_events
    assert theirs["overlap"] == pytest.approx(100 * (200 + RELU_US[0] + RELU_US[1]) / 1000, abs=0.01)
    # flameprof keeps the orphan kernel: the device ran it
    ours = flameprof_figures(str(path))
    assert ours["temporal"]["idle"] == pytest.approx(100 * 330 / 1800)
    assert theirs["temporal"]["idle"] == pytest.approx(100 * 340 / 1800, abs=0.01)


def test_exposed_communication_is_the_verdict_and_syncs_count_on_any_thread():
    data = asdict(ops_report(read_kineto(json.dumps(comm_steps()).encode(), "t.json")))
    idle = data["device"]["idle"]
    # per step (1000 us) the computation idles at [0, 100), [420, 430), from the ReLU's end to 870,
    # and [900, 1000); the all_reduce runs over [420, 800) of that, the host's c10d op [38, 48);
    # another thread's sync [900, 950); the host is busy otherwise (less the orphan in step 0)
    comm = sum(380 - relu for relu in RELU_US) + 30
    assert idle["comm_percent"] == pytest.approx(comm / 30, abs=1e-6)
    assert idle["sync_percent"] == pytest.approx(150 / 30, abs=1e-6)
    assert idle["host_percent"] == pytest.approx(620 / 30, abs=1e-6)
    assert idle["data_percent"] == 0
    overlap = 100 * (200 + RELU_US[0] + RELU_US[1]) / 1000
    assert idle["level"] == "comm"
    assert idle["verdict"] == (
        f"communication-bound: the device's computation idles {comm / 30:.1f}% of the step waiting for "
        f"AllReduce; {overlap:.1f}% of communication overlaps computation"
    )


def test_kernel_statistics_and_totals():
    data = asdict(ops_report(read_kineto(json.dumps(comm_steps()).encode(), "t.json")))
    device = data["device"]
    assert device["device_events"] == 5 * 3 + 1
    durations = 3 * (300 + 500 + 20 + 30) + sum(RELU_US) + 10
    assert device["device_seconds"] == pytest.approx(durations * 1e-6)
    relu = next(k for k in device["kernels"] if k["name"] == "relu_kernel")
    seconds = [r * 1e-6 for r in RELU_US]
    assert relu["count"] == 3 and relu["type"] == "computation"
    assert relu["seconds"] == pytest.approx(sum(seconds))
    assert (relu["min"], relu["max"]) == pytest.approx((min(seconds), max(seconds)))
    assert relu["mean"] == pytest.approx(statistics.mean(seconds))
    assert relu["std"] == pytest.approx(statistics.stdev(seconds))
    orphan = next(k for k in device["kernels"] if k["name"] == ORPHAN)
    assert orphan["count"] == 1 and orphan["std"] == 0
    assert device["kernels"][0]["name"] == ALL_REDUCE  # the most time first
    # the collective's kernels by the layer that launched them: c10d::allreduce_ is in none
    assert device["communication_by_layer"] == {"(no layer)": pytest.approx(3 * 500e-6)}


def _cli(*args: str) -> str:
    proc = run_flameprof(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_report_says_it_in_text_markdown_and_html(tmp_path):
    source = tmp_path / "t.json"
    source.write_text(json.dumps(comm_steps()))
    out = tmp_path / "p.flameprof"
    _cli("import", str(source), "-o", str(out))
    text = _cli("report", str(out))
    assert "communication-bound" in text and "waiting for AllReduce" in text
    assert f"stream {COMM_STREAM}: busy 1.000 ms in 2 events" in text
    assert "relu_kernel" in text
    markdown = _cli("report", str(out), "--format", "markdown")
    assert "| kernel | type | total | count | mean | min | max | stddev |" in markdown
    _cli("render", str(out), "--format", "html", "-o", str(tmp_path / "r.svg"))
    page = (tmp_path / "r.html").read_text()
    assert 'id="fp-kernels"' in page and "communication-bound" in page


def test_a_trace_without_streams_or_correlations_still_breaks_down():
    """Device events on streams no one declared and without correlation ids: every one counts,
    no host wait can be told, nothing fails."""
    document = comm_steps()
    for event in document["traceEvents"]:
        event.get("args", {}).pop("correlation", None)
        event.get("args", {}).pop("stream", None)
    device = device_times(_trace(document))[0]
    assert all(s.host_wait == 0 for s in device.streams)
    assert device.computation > 0 and device.communication > 0


def test_a_rocm_trace_reads_its_syncs():
    document = comm_steps()
    for event in document["traceEvents"]:
        event["name"] = event["name"].replace("cuda", "hip")
    data = asdict(ops_report(read_kineto(json.dumps(document).encode(), "t.json")))
    assert data["device"]["idle"]["sync_percent"] == pytest.approx(150 / 30, abs=1e-6)
    assert data["device"]["sync"]["count"] == 3


_spans = st.lists(st.tuples(st.integers(0, 900), st.integers(0, 100)), max_size=12)


def _set(spans):
    starts = np.array([s for s, _ in spans], dtype=float)
    return intervals.merged(starts, starts + np.array([d for _, d in spans], dtype=float))


def _mask(spans, grid):
    covered = np.zeros(len(grid), dtype=bool)
    for s, d in spans:
        covered |= (grid >= s) & (grid < s + d)
    return covered


@settings(max_examples=200, deadline=None)
@given(_spans, _spans, st.integers(0, 500), st.integers(0, 500))
def test_interval_arithmetic_matches_a_unit_grid(a_spans, b_spans, lo, width):
    grid = np.arange(0, 1001) + 0.5  # each unit of time by its middle
    a, b = _set(a_spans), _set(b_spans)
    in_a, in_b = _mask(a_spans, grid), _mask(b_spans, grid)
    assert intervals.length(a) == in_a.sum()
    assert intervals.overlap(a, b) == (in_a & in_b).sum()
    both = intervals.intersection(a, b)
    assert intervals.length(both) == (in_a & in_b).sum()
    assert (both[:, 1] > both[:, 0]).all() and (both[1:, 0] >= both[:-1, 1]).all()  # disjoint, sorted
    assert intervals.length(intervals.minus(a, b)) == (in_a & ~in_b).sum()
    window = (grid >= lo) & (grid < lo + width)
    assert intervals.length(intervals.gaps(a, lo, lo + width)) == (~in_a & window).sum()
    assert intervals.covered(a, lo, lo + width) == (in_a & window).sum()
