"""The op table of ``report --ops`` (analyze/op_table.py): device time to the op that launched it,
each moment once per row however ops nest, FLOPs and bytes per traced step, shapes, the options and
the formats."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import assert_one_error_line, run_flameprof
from kineto_traces import LINEAR_FLOPS, gpu_step

from flameprof.analyze.op_table import op_table, op_type, output_shape
from flameprof.collect.importers.load import load_bytes


@pytest.fixture
def trace():
    return load_bytes(json.dumps(gpu_step()).encode(), "gpu.json").trace


def test_device_time_goes_to_the_op_that_launched_it(trace):
    table = op_table(trace)
    assert table.device_time and table.steps == 1
    rows = {r.key: r for r in table.rows}
    assert rows["aten::addmm"].self == pytest.approx(200e-6) and rows["aten::linear"].self == 0.0
    assert rows["aten::linear"].total == pytest.approx(200e-6)  # the GEMM it launched through addmm
    assert rows["aten::mm"].self == pytest.approx(100e-6)
    assert [r.key for r in table.rows][:3] == ["aten::addmm", "aten::mm", "aten::copy_"]
    assert rows["aten::addmm"].flops + rows["aten::mm"].flops == LINEAR_FLOPS
    assert rows["aten::addmm"].flops_per_s == pytest.approx(rows["aten::addmm"].flops / 200e-6)
    # inputs [16], [8, 32], [32, 16] and the output [8, 16], 4 bytes an element (no dtypes recorded)
    assert rows["aten::addmm"].bytes == 4 * (16 + 8 * 32 + 32 * 16 + 8 * 16)
    assert rows["aten::addmm"].output_shapes == "[8, 16]" and rows["aten::addmm"].layer == "Net.0 (Linear)"


def test_bytes_follow_the_dtypes_a_real_trace_records(tmp_path):
    """torch.profiler on this CPU: a bf16 matmul moves 2 bytes an element, a float64 add 8, an int64
    add 8 (``long int``)."""
    import torch

    a, d, i = torch.ones(8, 16, dtype=torch.bfloat16), torch.ones(3, 5, dtype=torch.float64), torch.arange(6)
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.mm(a, a.t())
        torch.add(d, d)
        torch.add(i, i)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    rows = {r.key: r for r in op_table(load_bytes(path.read_bytes(), str(path)).trace).rows}
    assert rows["aten::mm"].bytes == 2 * (8 * 16 + 16 * 8 + 8 * 8)
    assert rows["aten::add"].bytes == 8 * 3 * (3 * 5) + 8 * 3 * 6


def test_rows_by_layer_and_type_count_each_moment_once(trace):
    layers = {r.key: r for r in op_table(trace, "layer").rows}
    assert layers["Net.0 (Linear)"].self == pytest.approx(300e-6)
    assert layers["Net.0 (Linear)"].total == pytest.approx(300e-6)  # linear, addmm and the backward nest
    types = {r.key: r for r in op_table(trace, "type").rows}
    assert types["matmul"].self == pytest.approx(300e-6) and types["copy"].self == pytest.approx(40e-6)


def test_order_filter_and_match(trace):
    assert op_table(trace, order_by="flops").rows[0].key in ("aten::addmm", "aten::mm")
    assert [r.key for r in op_table(trace, min_time=50e-6).rows] == ["aten::addmm", "aten::mm"]
    assert [r.key for r in op_table(trace, match="mm$").rows] == ["aten::addmm", "aten::mm"]
    assert len(op_table(trace, top=2).rows) == 2
    with pytest.raises(ValueError):
        op_table(trace, aggregate_by="kernel")


def test_op_types_and_output_shapes():
    assert [
        op_type(n) for n in ("aten::addmm", "aten::convolution", "aten::native_layer_norm", "aten::gelu")
    ] == [
        "matmul",
        "convolution",
        "normalization",
        "activation",
    ]
    assert op_type("aten::_foreach_add_") == "other"
    assert output_shape("aten::bmm", [[4, 8, 16], [4, 16, 32]]) == [4, 8, 32]
    assert output_shape("aten::linear", [[2, 7, 64], [128, 64], [128]]) == [2, 7, 128]
    assert output_shape("aten::relu", [[3, 5]]) == [3, 5]
    assert output_shape("aten::convolution", [[1, 3, 8, 8], [4, 3, 3, 3]]) is None
    assert output_shape("aten::cat", [[[12, 64], [12, 64]], []]) is None  # a tensor list: not inferred


def test_a_tensor_list_input_counts_each_tensor():
    from flameprof.analyze.op_table import _bytes

    assert _bytes("aten::cat", "[[[12, 64, 128], [12, 64, 128]], []]", "") == (4 * 2 * 12 * 64 * 128, "")
    assert _bytes("aten::reshape", "[[12, 64, 128], []]", "") == (0.0, "")  # a view moves nothing
    assert _bytes("aten::add", "[[8, 4], [8, 4], []]", '["c10::BFloat16", "c10::BFloat16", "Scalar"]') == (
        2 * 3 * 32,
        "[8, 4]",
    )


def test_the_cli_in_every_format(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_step()))
    text = run_flameprof("report", str(path), "--ops", "--top", "2").stdout
    assert (
        "device time" in text
        and "aten::addmm [[[16],[8,32],[32,16],[],[]] -> [8, 16]] (Net.0 (Linear))" in text
    )
    rows = list(
        csv.DictReader(io.StringIO(run_flameprof("report", str(path), "--ops", "--format", "csv").stdout))
    )
    assert rows[0]["name"] == "aten::addmm" and rows[0]["self ms"] == "0.200"
    data = json.loads(
        run_flameprof("report", str(path), "--ops", "--format", "json", "--aggregate-by", "type").stdout
    )
    assert data["aggregate_by"] == "type" and data["rows"][0]["key"] == "matmul"
    md = run_flameprof("report", str(path), "--ops", "--format", "markdown").stdout
    assert "| `aten::addmm` | 0.200 |" in md
    folded = tmp_path / "x.folded"
    folded.write_text("main;work 5\n")
    assert_one_error_line(run_flameprof("report", str(folded), "--ops"), "no traced window")
    assert_one_error_line(run_flameprof("report", str(path), "--format", "csv"), "add --ops")
    assert_one_error_line(run_flameprof("report", str(path), "--ops", "--match", "("), "--match")
