"""torch.profiler (Kineto) traces: the GPU paths on a trace written to the format here, and real CPU
traces made by torch.profiler in the test, whose totals torch itself reports."""

import gzip
import io
import json
import zipfile
from dataclasses import asdict

import numpy as np
import pytest
import torch
from conftest import assert_one_error_line, run_flameprof
from kineto_traces import (
    COPY_BYTES,
    DDP_PHASES_US,
    DEVICE_BUSY_US,
    IDLE_DATA_US,
    IDLE_SYNC_US,
    IDLE_US,
    LINEAR_FLOPS,
    LINEAR_KERNEL_US,
    LOOP,
    PID,
    ddp_step,
    gpu_step,
)
from torch import nn

from flameprof.analyze.ops import device_verdict, ops_report
from flameprof.analyze.views import display_stacks
from flameprof.collect.importers.kineto import decode_document, read_trace
from flameprof.collect.importers.load import load_bytes
from flameprof.errors import FlameprofError
from flameprof.model import storage
from flameprof.model.phase_names import PHASES
from flameprof.model.trace import OP


def _report(tmp_path, doc: dict, name: str = "trace.json") -> dict:
    path = tmp_path / name
    raw = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    proc = run_flameprof("report", "--format", "json", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", ["trace.json", "trace.pt.trace.json.gz"])
def test_gpu_step_kernels_go_to_the_layer_and_phase_that_launched_them(tmp_path, name):
    data = _report(tmp_path, gpu_step(), name)
    device = data["device"]
    assert device["busy_percent"] == pytest.approx(100 * DEVICE_BUSY_US / 1000, abs=0.01)
    assert device["steps"][0]["busy_percent"] == pytest.approx(36.0, abs=0.01)
    # The forward GEMM and the backward GEMM (linked by the autograd sequence number) both belong to
    # the Linear; the optimizer's kernel to the optimizer; the copy to no layer.
    assert device["kernel_by_layer"]["Net.0 (Linear)"] == pytest.approx(LINEAR_KERNEL_US / 1e6)
    phases = device["kernel_by_phase"]
    assert phases["forward"] == pytest.approx(200e-6)
    assert phases["backward"] == pytest.approx(100e-6)
    assert phases["optimizer"] == pytest.approx(20e-6)
    copy = device["copies"]["host_to_device"]
    assert (copy["count"], copy["bytes"]) == (1, COPY_BYTES)
    assert copy["seconds"] == pytest.approx(40e-6)
    sync = device["sync"]
    assert sync["count"] == 1 and sync["seconds"] == pytest.approx(100e-6)
    assert sync["sites"][0]["site"] == "aten::item"  # no samples here: the op that synchronised


def test_gpu_step_idle_time_is_explained_and_judged(tmp_path):
    data = _report(tmp_path, gpu_step())
    idle = data["device"]["idle"]
    assert idle["seconds"] == pytest.approx(IDLE_US / 1e6)
    # shares of the step's wall time (1000 us)
    assert idle["percent"] == pytest.approx(IDLE_US / 10, abs=0.01)
    assert idle["data_percent"] == pytest.approx(IDLE_DATA_US / 10, abs=0.01)
    assert idle["sync_percent"] == pytest.approx(IDLE_SYNC_US / 10, abs=0.01)
    assert idle["host_percent"] == pytest.approx((IDLE_US - IDLE_DATA_US - IDLE_SYNC_US) / 10, abs=0.01)
    assert idle["level"] == "input" and idle["verdict"].startswith("highly input-bound")
    assert data["verdict"]["device"] == {"level": "input", "text": idle["verdict"]}


@pytest.mark.parametrize(
    "shares, level, start",
    [
        ({"data": 0.06, "sync": 0.5, "host": 0.0}, "input", "moderately input-bound"),
        ({"data": 0.01, "sync": 0.3, "host": 0.1}, "sync", "sync-bound"),
        ({"data": 0.01, "sync": 0.0, "host": 0.25}, "host", "host-bound"),
        ({"data": 0.01, "sync": 0.05, "host": 0.1}, "device", "device-bound"),
    ],
)
def test_device_verdict_thresholds(shares, level, start):
    found, text = device_verdict(shares)
    assert found == level and text.startswith(start)


def test_gpu_step_layers_ops_and_memory(tmp_path):
    data = _report(tmp_path, gpu_step())
    layer = next(r for r in data["ops"]["layers"] if r["name"] == "Net.0 (Linear)")
    assert layer["flops"] == LINEAR_FLOPS
    assert layer["forward"] > 0 and layer["backward"] > 0
    assert layer["gflops_per_s"] == pytest.approx(LINEAR_FLOPS / (LINEAR_KERNEL_US / 1e6) / 1e9, rel=1e-3)
    memory = data["memory"]
    assert memory["device"] == "device 0" and memory["peak"] == 1536
    assert (memory["peak_layer"], memory["peak_op"]) == ("Net.0 (Linear)", "aten::addmm")
    held = {r["name"]: r for r in memory["layers"]}["Net.0 (Linear)"]
    assert held["allocated"] == 1536 and held["held"] == 1536
    assert data["ops"]["steps"] == 1
    top = {r["name"]: r for r in data["ops"]["top"]}
    assert top["aten::addmm"]["shapes"] == ["[[16],[8,32],[32,16],[],[]]"]
    # the samples made from the trace: the loop thread's phases as the trace says (its backward ran
    # on autograd's device thread)
    assert data["phases"]["optimizer"]["seconds"] == pytest.approx(50e-6, abs=1e-9)
    assert data["phases"]["data"]["seconds"] == pytest.approx(300e-6, abs=1e-9)


def test_phases_come_from_the_trace_structure_wherever_its_threads_run_them(tmp_path):
    data = _report(tmp_path, ddp_step())
    seconds = {name: row["seconds"] for name, row in data["phases"].items()}
    for phase, us in DDP_PHASES_US.items():  # the loop thread, which waited in backward() unannotated
        assert seconds[phase] == pytest.approx(us * 1e-6, abs=1e-9), (phase, seconds)
    # the ops themselves: autograd's thread is backward but for its collectives
    profile = load_bytes(json.dumps(ddp_step()).encode(), "ddp.json")
    trace = profile.trace
    phase = {trace.names[n]: PHASES[p] for n, p in zip(trace.events["name"], trace.events["phase"])}
    assert phase["torch.distributed.ddp.reducer::copy_bucket_to_grad"] == "backward"
    assert phase["AddmmBackward0"] == "backward"
    assert phase["c10d::allreduce_"] == phase["c10d::broadcast_"] == "comm"
    assert phase["aten::addmm"] == "forward" and phase["aten::add_"] == "optimizer"


def test_a_cpu_trace_keeps_its_loop_thread_out_of_the_autograd_engine(tmp_path):
    # on a CPU the thread that calls backward() runs it: without steps or module annotations its
    # forward ops stay its own, never the engine's backward
    torch.manual_seed(0)
    model, batch = Net(), torch.randn(4, 3, 16, 16)
    with torch.profiler.profile() as prof:
        for _ in range(3):
            model(batch).sum().backward()
    path = str(tmp_path / "cpu.json")
    prof.export_chrome_trace(path)
    trace, _ = read_trace(decode_document(open(path, "rb").read(), path), path)
    phase = {trace.names[n]: PHASES[p] for n, p in zip(trace.events["name"], trace.events["phase"])}
    assert phase["aten::conv2d"] == "other" and phase[
        "autograd::engine::evaluate_function: AddmmBackward0"
    ] == ("backward")


def test_flameprof_file_keeps_the_trace(tmp_path):
    profile = load_bytes(json.dumps(gpu_step()).encode(), "gpu.json")
    again = storage.loads(storage.dumps(profile))
    assert again.trace is not None
    assert again.trace.names == profile.trace.names
    for key, column in profile.trace.events.items():
        np.testing.assert_array_equal(again.trace.events[key], column)
    assert ops_report(again) == ops_report(profile)


def test_the_ops_dtypes_and_the_devices_are_kept_and_an_older_file_reads_without_them():
    doc = gpu_step()
    doc["traceEvents"][8]["args"]["Input type"] = ["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"]
    doc["deviceProperties"].append({"id": 1, "computeMajor": "x"})  # no name, an unreadable capability
    doc["deviceProperties"].append({"id": "2", "name": "no integer id: left out"})
    profile = load_bytes(json.dumps(doc).encode(), "gpu.json")
    trace = profile.trace
    assert trace.devices == {0: ("NVIDIA H100", 9, 0), 1: ("", -1, -1)}
    addmm = trace.names.index("aten::addmm")
    types = trace.events["types"][trace.events["name"] == addmm]
    assert [trace.name_of(t) for t in types] == ['["c10::Half","c10::Half","c10::Half","Scalar","Scalar"]']
    data = storage.dumps(profile)
    again = storage.loads(data)
    np.testing.assert_array_equal(again.trace.events["types"], trace.events["types"])
    assert again.trace.devices == trace.devices
    # a file written before dtypes and devices were kept: its ops' dtypes are none
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        head = json.loads(z.read("trace.json"))
        members = {i.filename: z.read(i) for i in z.infolist() if i.filename != "trace_events_types.npy"}
    del head["devices"]
    members["trace.json"] = json.dumps(head).encode()
    old = io.BytesIO()
    with zipfile.ZipFile(old, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    before = storage.loads(old.getvalue())
    assert (before.trace.events["types"] == -1).all() and before.trace.devices == {}
    np.testing.assert_array_equal(before.trace.events["shapes"], trace.events["shapes"])
    head["devices"] = [[0, "H100", "9", 0]]
    bad = _rewritten(data, {"trace.json": json.dumps(head).encode()})
    with pytest.raises(FlameprofError, match="devices"):
        storage.loads(bad)


def _rewritten(data: bytes, members: dict[str, bytes]) -> bytes:
    """A .flameprof file's bytes with some members replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            new.writestr(info.filename, members.get(info.filename, old.read(info.filename)))
    return out.getvalue()


def test_a_file_written_before_the_shared_phase_names_reads_with_its_phases():
    """Files whose trace.json lists no phases indexed (data, forward, backward, optimizer, sync,
    other, comm): read today, their events keep those phases."""
    profile = load_bytes(json.dumps(ddp_step()).encode(), "ddp.json")
    trace = profile.trace
    names = [PHASES[p] for p in trace.events["phase"]]
    assert {"comm", "other", "backward", "forward", "optimizer"} <= set(names)
    data = storage.dumps(profile)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        head = json.loads(z.read("trace.json"))
    assert head["phases"] == list(PHASES)
    del head["phases"]
    old_order = ("data", "forward", "backward", "optimizer", "sync", "other", "comm")
    column = io.BytesIO()
    np.save(column, np.array([old_order.index(n) for n in names], np.int8))
    old = _rewritten(
        data, {"trace.json": json.dumps(head).encode(), "trace_events_phase.npy": column.getvalue()}
    )
    again = storage.loads(old)
    assert [PHASES[p] for p in again.trace.events["phase"]] == names
    # an index past the file's own list is a corrupt file, not a wrong phase
    np.save(column := io.BytesIO(), np.full(len(names), len(old_order), np.int8))
    with pytest.raises(FlameprofError, match="phase out of range"):
        storage.loads(_rewritten(old, {"trace_events_phase.npy": column.getvalue()}))


def test_annotations_named_for_eval_and_checkpoint_declare_those_phases():
    doc = ddp_step()
    end = max(e["ts"] + e.get("dur", 0) for e in doc["traceEvents"] if e.get("ph") == "X")

    def event(cat: str, name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": end + ts, "dur": dur, "pid": PID, "tid": LOOP}

    doc["traceEvents"] += [
        event("user_annotation", "## eval ##", 10, 50),
        event("cpu_op", "aten::argmax", 20, 20),
        event("user_annotation", "checkpoint", 70, 30),
        event("cpu_op", "aten::_to_copy", 75, 10),
    ]
    trace = load_bytes(json.dumps(doc).encode(), "ddp.json").trace
    phase = {trace.names[n]: PHASES[p] for n, p in zip(trace.events["name"], trace.events["phase"])}
    assert phase["aten::argmax"] == "eval" and phase["aten::_to_copy"] == "checkpoint"


@pytest.mark.parametrize(
    "content, needle",
    [
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1,',
            "not a readable trace: Expecting property name enclosed in double quotes at line 1",
        ),
        (gzip.compress(b'{"traceEvents": []}')[:-6], "corrupt or truncated gzip"),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "x"}]}', "event 0"),
        (
            b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": -5}]}',
            "negative",
        ),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1e400}]}', "out of range"),
        (b'{"schemaVersion": 1, "traceEvents": []}', "no op, kernel or memory event"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "step", "name": "s", "ts": 1}]}',
            "not a torch.profiler trace",
        ),
        (b'{"traceEvents": [{"ph": "i"}] "x": 1}', "expected ',' at line 1 column 31"),
        (b'{"traceEvents": []} trailing', "extra data at line 1 column 21"),
        (b'{"schemaVersion": 1, "other": []}', "no traceEvents array"),
        (b'{"traceEvents": [' + b"[" * 100000, "nested too deeply"),
        # read by the C Scanner up to the defect, then by the standard library (test_kineto_stream.py)
        (json.dumps(gpu_step()).encode()[:-100], "Expecting ',' delimiter"),
        (json.dumps(gpu_step()).encode()[:-1], "found the end"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\xff", "ts": 1}]}', "not UTF-8 text"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1}, 5]}',
            "trace event 1 is not an object",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"}]}',
            "trace event 0 ('a'): ts is not a number",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": -1}]}',
            "negative duration",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"bytes": []}}]}',
            "bytes is not",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1}, {"ph": "X",, }]}',
            "Expecting",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1} {"ph": "X"}]}',
            "expected ','",
        ),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\x01", "ts": 1}]}', "Invalid control"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e999}]}', "out of range"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": -Infinity}]}', "out of range"),
        (
            b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": 1e300}}]}',
            "Bytes is out",
        ),
        (b'{"traceEvents": [{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", "nested too deeply"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1}]',
            "expected ',' at line 1 column 69, found the end",
        ),
    ],
)
def test_a_bad_trace_is_one_error_line(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    proc = run_flameprof("import", str(path), "-o", str(tmp_path / "x.flameprof"))
    assert_one_error_line(proc, needle)
    assert proc.returncode == 2
    assert not (tmp_path / "x.flameprof").exists()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_real_cpu_trace_op_times_and_flops_match_torch_profiler(tmp_path):
    torch.manual_seed(0)
    model, batch = Net(), torch.randn(4, 3, 16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def profiled(steps: int) -> torch.profiler.profile:
        with torch.profiler.profile(
            record_shapes=True, with_flops=True, with_modules=True, with_stack=True
        ) as prof:
            for _ in range(steps):
                opt.zero_grad()
                model(batch).sum().backward()
                opt.step()
        return prof

    # with_stack's tracer keeps pointers to the names of the code objects it saw, and torch's first
    # profile with it in a process imports a module (torch.profiler._cupti_monitor) and compiles
    # code inside the window: those code objects are gone when key_averages reads their names, which
    # were then now and then undecodable bytes (UnicodeDecodeError, 1 run in 3 after another test's
    # profile; torch 2.13). A first window, never read, does that importing.
    profiled(1)
    prof = profiled(3)
    torch_self = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    path = str(tmp_path / "cpu.json")
    prof.export_chrome_trace(path)
    trace, _ = read_trace(decode_document(open(path, "rb").read(), path), path)
    profile = load_bytes(open(path, "rb").read(), path)
    ops = asdict(ops_report(profile))["ops"]
    # op time: every op's self time, summed, is torch's own self CPU total of those ops (its table
    # also lists the Python functions with_stack records, which are not ops)
    op_names = {trace.names[n] for n, k in zip(trace.events["name"], trace.events["kind"]) if k == OP}
    assert op_names <= set(torch_self)
    assert ops["op_seconds"] == pytest.approx(sum(torch_self[n] for n in op_names), rel=0.01)
    # FLOPs of the forward passes: the analytic counts (2 per multiply-add); layers are named from
    # with_modules' annotations (nn.Module: <class>_<index>)
    conv = 2 * 4 * 8 * (8 * 8) * 3 * 3 * 3
    linear = 2 * 4 * 512 * 10
    layers = {r["name"]: r for r in ops["layers"]}
    assert layers["Net_0.Conv2d_0"]["forward_flops"] == 3 * conv
    assert layers["Net_0.Linear_0"]["forward_flops"] == 3 * linear
    # the backward ops of each layer are found through the autograd sequence numbers
    assert layers["Net_0.Conv2d_0"]["backward"] > 0 and layers["Net_0.Linear_0"]["backward"] > 0


def test_ops_view_and_chrome_trace_show_the_window(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_step()))
    stacks = {
        ";".join(f.name for f in frames): weight
        for frames, weight in display_stacks(load_bytes(path.read_bytes(), "gpu.json"), "wall", "ops")
    }
    # layer -> op -> the ops it calls -> kernel, weighted by device time
    assert stacks["Net.0 (Linear);aten::linear;aten::addmm;sm90_gemm_fwd"] == pytest.approx(200e-6)
    backward = "Net.0 (Linear);autograd::engine::evaluate_function: AddmmBackward0;AddmmBackward0;aten::mm"
    assert stacks[backward + ";sm90_gemm_bwd"] == pytest.approx(100e-6)
    # and the device's idle time under what the host was in then
    assert stacks["(data);(device idle)"] == pytest.approx(310e-6)
    assert stacks["Net.0 (Linear);(device idle)"] == pytest.approx(10e-6)
    assert sum(stacks.values()) == pytest.approx(1000e-6)  # busy and idle: the whole step
    svg = tmp_path / "ops.svg"
    proc = run_flameprof("render", str(path), "--view", "ops", "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    assert "sm90_gemm_fwd" in svg.read_text()
    proc = run_flameprof("render", str(path), "--format", "chrome", "-o", str(tmp_path / "g.svg"))
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "g.trace.json").read_text())["traceEvents"]
    kernels = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    assert kernels["sm90_gemm_bwd"]["args"] == {"layer": "Net.0 (Linear)", "phase": "backward"}
    assert kernels["sm90_gemm_fwd"]["ts"] == pytest.approx(360.0)  # on the samples' time base
    memory = [e["args"]["value"] for e in events if e.get("name") == "torch allocated (MiB)"]
    assert max(memory) == pytest.approx(1536 / (1 << 20), rel=1e-3)


def test_ops_view_without_a_window_is_one_error_line(tmp_path):
    folded = tmp_path / "x.folded"
    folded.write_text("main;work 10\n")
    proc = run_flameprof("render", str(folded), "--view", "ops", "-o", str(tmp_path / "x.svg"))
    assert_one_error_line(proc, "no traced window")


def test_html_report_has_the_traced_window(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_step()))
    proc = run_flameprof("render", str(path), "--format", "html", "-o", str(tmp_path / "g.svg"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "g.html").read_text()
    for anchor in ("fp-traced-window", "fp-ops", "fp-op-layers", "fp-memory-chart", "fp-device"):
        assert f'id="{anchor}"' in html, anchor
    # kernels are in the device's table only: the flame graph shows the samples
    before_graph = html.split('id="fp-flamegraph"')[0]
    assert before_graph.count("sm90_gemm_fwd") == 1 and "<td>sm90_gemm_fwd</td>" in before_graph
    assert "highly input-bound" in html


def test_a_sync_is_named_by_the_python_call_site_the_samples_saw():
    """With samples beside the window (an in-process run), the host's blocked time is given to the
    program's own frame the samples saw during the sync, not to the op."""
    from flameprof.model.builder import ProfileBuilder
    from flameprof.model.profile import Frame

    traced = load_bytes(json.dumps(gpu_step()).encode(), "gpu.json")
    builder = ProfileBuilder()
    thread = builder.thread_id(4242, 1, "MainThread")  # the trace's loop thread (pid 4242, tid 1)
    site = builder.stack_id(
        [
            builder.frame(Frame("<module>", "/work/train.py", 1)),
            builder.frame(Frame("train_step", "/work/train.py", 50)),
            builder.frame(Frame("Tensor.item", "/usr/lib/python3/site-packages/torch/_tensor.py", 10)),
        ]
    )
    for k in range(5):  # 1 kHz samples inside cudaDeviceSynchronize [850, 950] us
        builder.add_sample(860e-6 + k * 20e-6, thread, site, 1e-3, 0.0)
    profile = builder.build()
    profile.trace = traced.trace
    sync = asdict(ops_report(profile))["device"]["sync"]
    assert sync["sites"] == [
        {"site": "train_step (train.py:50)", "count": 1, "seconds": pytest.approx(100e-6)}
    ]


def test_device_idle_goes_to_what_the_host_was_in_and_to_the_python_call_site():
    """The step's 640 us of device idle: 310 while the host waits for data, 180 around the sync, 70
    between backward's launch and the optimizer, 70 in the optimizer before its launch, 10 inside
    the Linear layer (between the copy and the GEMM); with samples, by the program's own frames."""
    from flameprof.model.builder import ProfileBuilder
    from flameprof.model.profile import Frame

    traced = load_bytes(json.dumps(gpu_step()).encode(), "gpu.json")
    device = ops_report(traced).device
    assert device is not None
    assert {k: round(v * 1e6, 3) for k, v in device.idle_by_layer.items()} == {
        "(data)": 310.0,
        "(sync)": 180.0,
        "(other)": 70.0,
        "(optimizer)": 70.0,
        "Net.0 (Linear)": 10.0,
    }
    assert sum(device.idle_by_layer.values()) == pytest.approx(IDLE_US / 1e6)
    assert device.idle_by_site == {} and device.communication_by_layer == {}  # no samples, no collective

    builder = ProfileBuilder()
    thread = builder.thread_id(4242, 1, "MainThread")
    root = builder.frame(Frame("<module>", "/work/train.py", 1))
    for name, line, times in (
        ("load_batch", 10, range(20, 300, 20)),
        ("train_step", 50, range(860, 1000, 20)),
    ):
        stack = builder.stack_id([root, builder.frame(Frame(name, "/work/train.py", line))])
        for t in times:
            builder.add_sample(t * 1e-6, thread, stack, 20e-6, 0.0)
    profile = builder.build()
    profile.trace = traced.trace
    sites = ops_report(profile).device.idle_by_site
    assert sites == {
        "load_batch (train.py:10)": pytest.approx(310e-6),
        "train_step (train.py:50)": pytest.approx(180e-6),
    }
