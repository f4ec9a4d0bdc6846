"""Exports: speedscope JSON, Chrome trace / Perfetto JSON, pprof, and ``--format`` on run."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess

import numpy as np
import pytest
from conftest import assert_one_error_line, run_flameprof
from synthetic import PHASE_STACKS, TICK, training_profile

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.phases import phase_of_samples
from flameprof.collect.importers.folded import read_folded
from flameprof.errors import FlameprofError
from flameprof.model.builder import ProfileBuilder
from flameprof.model.frames import Labeler
from flameprof.model.phase_names import LEAF_PHASES
from flameprof.model.profile import Frame
from flameprof.render.chrome_trace import write_chrome_trace
from flameprof.render.formats import step_spans
from flameprof.render.pprof import render_pprof
from flameprof.render.speedscope import render_speedscope

TICKS = {"data": 2, "encoder": 3, "head": 1, "tokenize": 1, "backward": 2, "optimizer": 1}
UNITS = {"none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"}


def labels_of(stack_name: str) -> list[str]:
    labeler = Labeler({"cwd": "/work"})
    return [labeler.label(f) for f in PHASE_STACKS[stack_name]]


def assert_speedscope_valid(doc: dict) -> None:
    """The constraints of speedscope's file-format schema (file-format-spec.ts) for sampled profiles."""
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert all(isinstance(f["name"], str) for f in frames)
    assert all(set(f) <= {"name", "file", "line", "col"} for f in frames)
    assert isinstance(doc["profiles"], list) and doc["profiles"]
    for p in doc["profiles"]:
        assert p["type"] == "sampled"
        assert isinstance(p["name"], str) and p["unit"] in UNITS
        assert p["endValue"] >= p["startValue"]
        assert len(p["samples"]) == len(p["weights"])
        assert all(isinstance(i, int) and 0 <= i < len(frames) for s in p["samples"] for i in s)
        assert all(w >= 0 for w in p["weights"])


def test_speedscope_one_time_ordered_profile_per_thread():
    profile = training_profile(TICKS, steps=3, worker_ticks=4)
    doc = json.loads(render_speedscope(profile))
    assert_speedscope_valid(doc)
    by_name = {p["name"]: p for p in doc["profiles"]}
    assert set(by_name) == {"main (pid 100) / MainThread (tid 100)", "main (pid 100) / pin_memory (tid 101)"}
    main = by_name["main (pid 100) / MainThread (tid 100)"]
    assert main["unit"] == "seconds"
    names = [f["name"] for f in doc["shared"]["frames"]]
    # Consecutive samples of one stack are one entry whose weight is their time, in time order.
    stacks = [[names[i] for i in s] for s in main["samples"]]
    expected = [(labels_of(name), count * TICK) for _ in range(3) for name, count in TICKS.items()]
    assert stacks == [e[0] for e in expected]
    assert main["weights"] == pytest.approx([e[1] for e in expected])
    worker = by_name["main (pid 100) / pin_memory (tid 101)"]
    assert sum(worker["weights"]) == pytest.approx(12 * TICK)


def test_speedscope_of_folded_counts_has_no_time_unit():
    profile = read_folded(["a;b 3", "a;c 2"])
    doc = json.loads(render_speedscope(profile))
    assert_speedscope_valid(doc)
    assert doc["profiles"][0]["unit"] == "none"
    assert sorted(doc["profiles"][0]["weights"]) == [2, 3]


def trace_of(profile, *args) -> list[dict]:
    out = io.StringIO()
    write_chrome_trace(profile, out, *args)
    return json.loads(out.getvalue())["traceEvents"]


def _spans(events, tid):
    """(start, end, name) of the spans of track ``tid``: X events, and B/E pairs, which must balance."""
    spans, open_ = [], []
    for e in events:
        if e.get("tid") != tid:
            continue
        if e["ph"] == "X":
            spans.append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif e["ph"] == "B":
            open_.append(e)
        elif e["ph"] == "E":
            begin = open_.pop()
            assert e["ts"] >= begin["ts"]
            spans.append((begin["ts"], e["ts"], begin["name"]))
    assert not open_, "unbalanced begin/end events"
    return sorted(spans, key=lambda s: (s[0], -s[1]))


def test_chrome_trace_timeline_tracks_and_counters():
    profile = training_profile(TICKS, steps=3)
    profile.counters = {
        "cpu_percent": (np.array([0.1, 0.2]), np.array([50.0, 97.0])),
        "rss_bytes": (np.array([0.1, 0.2]), np.array([2.0**20 * 100, 2.0**20 * 120])),
        "dataloader worker 0: rss_bytes": (np.array([0.15]), np.array([2.0**20 * 40])),
    }
    analysis = analyze(profile)
    events = trace_of(profile, analysis.sample_phase, LEAF_PHASES, step_spans(analysis))
    tracks = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"MainThread", "MainThread: layers and scopes", "MainThread: phases", "steps"} <= set(tracks)

    stack = _spans(events, tracks["MainThread"])
    # Spans nest: each span lies inside every earlier span it overlaps.
    for i, (_, a1, _) in enumerate(stack):
        for b0, b1, _ in stack[i + 1 :]:
            if b0 >= a1:
                break
            assert b1 <= a1 + 1e-6
    # The root frames stay open for the whole run; a step's data wait is one merged span of 2 samples.
    run_us = 3 * sum(TICKS.values()) * TICK * 1e6
    assert [s for s in stack if s[2] == "<module> (train.py:1)"] == [
        (0.0, pytest.approx(run_us), "<module> (train.py:1)")
    ]
    waits = [s for s in stack if s[2].startswith("_MultiProcessingDataLoaderIter._get_data")]
    assert [(round(a), round(b - a)) for a, b, _ in waits] == [(0, 20000), (100000, 20000), (200000, 20000)]

    phases = _spans(events, tracks["MainThread: phases"])
    assert [p[2] for p in phases[:5]] == ["data.wait", "forward", "other", "backward", "optimizer"]
    assert [round(b - a) for a, b, _ in phases[:5]] == [20000, 40000, 10000, 20000, 10000]
    layers = _spans(events, tracks["MainThread: layers and scopes"])
    assert [(round(a), round(b - a), n) for a, b, n in layers[:2]] == [
        (20000, 30000, "Net.encoder (Encoder)"),
        (50000, 10000, "Net.head (Linear)"),
    ]
    steps = _spans(events, tracks["steps"])
    assert [n for _, _, n in steps] == ["step 0", "step 1", "step 2"]
    assert [round(b - a) for a, b, _ in steps] == [100000] * 3

    counters = [(e["name"], e["ts"], e["args"]["value"]) for e in events if e["ph"] == "C"]
    assert ("CPU %", 100000.0, 50.0) in counters
    assert ("RSS (MiB)", 200000.0, 120.0) in counters
    assert ("RSS (MiB) (dataloader worker 0)", 150000.0, 40.0) in counters  # a merged child's counter


def test_chrome_trace_stays_nested_when_sample_intervals_overlap():
    b = ProfileBuilder({"start_time": 0.0})
    thread = b.thread_id(1, 1, "MainThread")
    a = b.stack_id([b.frame(Frame("a")), b.frame(Frame("b"))])
    c = b.stack_id([b.frame(Frame("a")), b.frame(Frame("c"))])
    # c's interval (0.05 s back from 0.2) reaches into a's, as a merged or imported profile can have
    for time, stack, wall in ((0.1, a, 0.1), (0.2, c, 0.15), (0.3, a, 0.1)):
        b.add_sample(time, thread, stack, wall)
    events = trace_of(b.build())
    spans = _spans(events, 1)  # balanced, each end after its begin
    stamps = [e["ts"] for e in events if e["ph"] in "BE"]
    assert stamps == sorted(stamps)
    assert [(n, a0, a1) for a0, a1, n in spans] == [
        ("a", 0, 300000),
        ("b", 0, 100000),
        ("c", 100000, 200000),
        ("b", 200000, 300000),
    ]


def test_chrome_trace_refuses_untimed_folded_input():
    with pytest.raises(FlameprofError, match="timestamped"):
        trace_of(read_folded(["a;b 3"], source="x.folded"))


# --- a small protobuf reader, to check the pprof encoder independently of it -----------------------
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _fields(buf: bytes) -> list[tuple[int, object]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.append((number, value))
    return out


def _packed(buf: bytes) -> list[int]:
    out, i = [], 0
    while i < len(buf):
        v, i = _varint(buf, i)
        out.append(v)
    return out


def _decode_pprof(data: bytes) -> dict:
    top = _fields(gzip.decompress(data))
    strings = [v.decode() for n, v in top if n == 6]
    assert strings[0] == ""
    types = [tuple(strings[v] for _, v in _fields(m)) for n, m in top if n == 1]
    functions = {}
    for n, m in top:
        if n == 5:
            f = dict(_fields(m))
            functions[f[1]] = strings[f[2]]
    locations = {}
    for n, m in top:
        if n == 4:
            f = _fields(m)
            lid = dict(f)[1]
            line = dict(_fields(dict(f)[4]))
            locations[lid] = functions[line[1]]
    samples = []
    for n, m in top:
        if n == 2:
            f = _fields(m)
            stack = [locations[i] for i in _packed(dict(f).get(1, b""))]  # absent: an empty stack
            values = _packed(dict(f)[2])
            labels = {strings[dict(_fields(v))[1]]: strings[dict(_fields(v))[2]] for k, v in f if k == 3}
            samples.append((stack, values, labels))
    return {
        "types": types,
        "samples": samples,
        "fields": dict((n, v) for n, v in top if n in (9, 10, 12, 14)),
    }


def test_pprof_sample_types_values_and_labels(tmp_path):
    profile = training_profile(TICKS, steps=4, worker_ticks=1)
    data = render_pprof(profile, "wall", phase_of_samples(profile), LEAF_PHASES)
    doc = _decode_pprof(data)
    assert doc["types"] == [("samples", "count"), ("wall", "nanoseconds"), ("cpu", "nanoseconds")]
    encoder = labels_of("encoder")
    rows = [
        (v, labels) for s, v, labels in doc["samples"] if s == encoder[::-1]
    ]  # pprof stacks are leaf first
    assert rows == [
        (
            [12, int(12 * TICK * 1e9), int(12 * TICK * 1e9)],
            {
                "phase": "forward",
                "layer": "Net.encoder (Encoder)",
                "process": "main (pid 100)",
                "thread": "MainThread (tid 100)",
            },
        )
    ]
    by_phase: dict[str, int] = {}
    for _, values, labels in doc["samples"]:
        by_phase[labels["phase"]] = by_phase.get(labels["phase"], 0) + values[0]
    assert by_phase == {"data.wait": 8, "forward": 16, "other": 4 + 4, "backward": 8, "optimizer": 4}
    assert doc["fields"][12] == int(TICK * 1e9)  # period: one sample at 100 Hz
    if shutil.which("go"):  # the reference reader, where installed (scripts/setup.sh does not need it)
        path = tmp_path / "p.pb.gz"
        path.write_bytes(data)
        top = subprocess.run(
            ["go", "tool", "pprof", "-top", "-nodecount=3", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert top.returncode == 0, top.stderr
        assert "Type: wall" in top.stdout
        assert "linear (torch/nn/functional.py:2000)" in top.stdout


def test_run_writes_requested_formats(write_script, tmp_path):
    script = write_script(
        "work.py",
        "import time\n"
        "def spin(seconds):\n"
        "    end = time.perf_counter() + seconds\n"
        "    while time.perf_counter() < end:\n"
        "        pass\n"
        "spin(1.0)\n",
    )
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "-o", str(out), "--format", "speedscope,chrome,pprof,html", script)
    assert proc.returncode == 0, proc.stderr
    assert_speedscope_valid(json.loads((out / "profile.speedscope.json").read_text()))
    trace = json.loads((out / "profile.trace.json").read_text())["traceEvents"]
    main = next(e["tid"] for e in trace if e["ph"] == "M" and e["args"].get("name") == "MainThread")
    spins = [s for s in _spans(trace, main) if s[2].startswith("spin (") and s[2].endswith("work.py:2)")]
    assert len(spins) == 1 and spins[0][1] - spins[0][0] > 0.8e6
    cpu = [e["args"]["value"] for e in trace if e["ph"] == "C" and e["name"] == "CPU %"]
    rss = [e["args"]["value"] for e in trace if e["ph"] == "C" and e["name"] == "RSS (MiB)"]
    assert len(cpu) >= 2 and min(cpu) >= 0 and max(cpu) > 0  # a busy loop, sampled every 100 ms
    assert rss and min(rss) > 5
    doc = _decode_pprof((out / "profile.pb.gz").read_bytes())
    assert any(s[0] and s[0][0].startswith("spin (") for s in doc["samples"])
    page = (out / "profile.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and '<div id="fp-flamegraph"><svg' in page and "spin (" in page


def test_format_takes_the_standard_names_and_all(write_script, tmp_path):
    """Users list svg and folded too; ``all`` writes every format; nothing is written twice."""
    from flameprof.render.formats import FORMATS

    script = write_script("x.py", "sum(range(100000))\n")
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "-o", str(out), "--format", "svg,folded,speedscope", script)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        "profile" + FORMATS[n].suffix for n in ("flameprof", "folded", "svg", "speedscope")
    )
    all_out = tmp_path / "all"
    assert run_flameprof("run", "-q", "-o", str(all_out), "--format", "all", script).returncode == 0
    assert sorted(p.name for p in all_out.iterdir()) == sorted("profile" + f.suffix for f in FORMATS.values())
    source = all_out / "profile.flameprof"
    before = source.read_bytes()
    proc = run_flameprof("render", str(source), "-o", str(all_out / "profile.svg"), "--format", "all")
    assert proc.returncode == 0, proc.stderr
    written = [line.split("wrote ")[1].split(" ")[0] for line in proc.stderr.splitlines()]
    assert len(written) == len(set(written)) == len(FORMATS) - 1  # not the input itself
    assert source.read_bytes() == before


def test_unknown_format_is_one_error_line(write_script):
    proc = run_flameprof("run", "--format", "speedscope,svgz", write_script("x.py", "pass\n"))
    assert_one_error_line(proc, "svgz")


def test_a_runs_outputs_and_summary_share_one_analysis(tmp_path, monkeypatch):
    """Every file of a run (standard and exports) and the summary come from one classification."""
    from flameprof.analyze import breakdown
    from flameprof.render.formats import FORMATS, Rendering
    from flameprof.render.options import OutputOptions
    from flameprof.render.outputs import write_outputs
    from flameprof.render.summary import format_summary

    calls = {"analyze": 0, "classify": 0}

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(breakdown, "analyze", counting("analyze", breakdown.analyze))
    monkeypatch.setattr(breakdown, "phase_of_samples", counting("classify", breakdown.phase_of_samples))
    profile = training_profile(TICKS, steps=3)
    rendering = Rendering(
        profile, OutputOptions(formats=("speedscope", "chrome", "pprof", "firefox", "html", "memory"))
    )
    paths = write_outputs(rendering, str(tmp_path))
    summary = format_summary(rendering, paths)
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == sorted(
        "profile" + f.suffix for f in FORMATS.values()
    )
    assert all((tmp_path / p.rsplit("/", 1)[1]).stat().st_size > 0 for p in paths)
    assert "verdict:" in summary
    assert calls == {"analyze": 1, "classify": 1}
