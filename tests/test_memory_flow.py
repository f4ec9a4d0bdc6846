"""Memory over the traced window (analyze/memory_flow.py, render/memory_svg.py) and the per-layer
memory lines: bands by the allocating layer add up to the allocator's total, the peak is named, and
no layer holds a negative amount."""

from __future__ import annotations

import json

import pytest
from conftest import run_flameprof
from kineto_traces import PID, _memory, _x, gpu_step

from flameprof.analyze.memory_flow import BEFORE, memory_flow
from flameprof.analyze.ops import ops_report
from flameprof.collect.importers.load import load_bytes
from flameprof.render.memory_svg import memory_svg


def _freed_by_the_root() -> dict:
    """Net's forward: Net.fc allocates 1000 bytes, then Net (the root) frees them: the root holds 0,
    not -1000; Net.out's 400 bytes stay."""
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        _x("user_annotation", "ProfilerStep#0", 0, 100),
        _x("user_annotation", "flameprof.layer: Net", 1, 90),
        _x("user_annotation", "flameprof.layer: Net.fc (Linear)", 2, 20),
        _x("cpu_op", "aten::addmm", 3, 10),
        _memory(5, 1000, 5000),
        _x("cpu_op", "aten::relu", 30, 10),
        _memory(35, -1000, 4000),
        _x("user_annotation", "flameprof.layer: Net.out (Linear)", 50, 20),
        _x("cpu_op", "aten::mm", 51, 10),
        _memory(55, 400, 4400),
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def test_the_bands_add_up_to_the_allocator_and_the_peak_is_named():
    trace = load_bytes(json.dumps(gpu_step()).encode(), "t.json").trace
    flow = memory_flow(trace)
    assert flow is not None and flow.device == "device 0"
    assert flow.peak == 1536 and (flow.peak_layer, flow.peak_op) == ("Net.0 (Linear)", "aten::addmm")
    totals = [sum(band[i] for band in flow.bands.values()) for i in range(len(flow.times))]
    assert totals == [512, 1536, 1024]  # the allocator's total after each event
    svg = memory_svg(flow)
    assert svg.startswith("<?xml") and "peak 1.5 kB at Net.0 (Linear) / aten::addmm" in svg
    assert "Net.0 (Linear)" in svg and BEFORE in svg


def test_no_layer_holds_a_negative_amount():
    profile = load_bytes(json.dumps(_freed_by_the_root()).encode(), "t.json")
    memory = ops_report(profile).memory
    assert memory is not None
    held = {m.name: m.held for m in memory.layers}
    assert held == {"Net.fc (Linear)": 1000.0, "Net": 400.0, "Net.out (Linear)": 400.0}
    flow = memory_flow(profile.trace)
    assert flow is not None and flow.bands[BEFORE] == [4000.0] * 3


def test_the_memory_format_and_the_html_report(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_step()))
    proc = run_flameprof("render", str(path), "--format", "memory,html", "-o", str(tmp_path / "g.svg"))
    assert proc.returncode == 0, proc.stderr
    assert "Memory in use on device 0" in (tmp_path / "g.memory.svg").read_text()
    assert 'id="fp-memory-flow"' in (tmp_path / "g.html").read_text()
    folded = tmp_path / "x.folded"
    folded.write_text("main;work 5\n")
    proc = run_flameprof("render", str(folded), "--format", "memory", "-o", str(tmp_path / "x.svg"))
    assert proc.returncode == 0 and "No memory events" in (tmp_path / "x.memory.svg").read_text()


@pytest.mark.parametrize("events", [0, 5000])
def test_a_long_window_is_thinned_to_real_events(events):
    doc = _freed_by_the_root()
    for k in range(events):
        doc["traceEvents"].append(
            _memory(60 + k * 0.01, 8 if k % 2 == 0 else -8, 4408 if k % 2 == 0 else 4400)
        )
    flow = memory_flow(load_bytes(json.dumps(doc).encode(), "t.json").trace)
    assert flow is not None and len(flow.times) <= 2001
    assert flow.peak == max(4408.0 if events else 5000.0, 5000.0)
