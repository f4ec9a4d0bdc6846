"""Graph advice (analyze/graph_advice.py): each piece against a profile that triggers it and one
that must not, and the folding it proposes measured on a copy of a ResNet-style CNN
(flameprof.check_folding)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from kineto_traces import _kernel, _x
from test_report import MODULE, TORCH
from torch import nn

import flameprof
from flameprof.analyze.precision_advice import misaligned
from flameprof.analyze.report import report_of
from flameprof.collect.importers.load import load_bytes
from flameprof.examples.resnet import ResNetish
from flameprof.model.builder import ProfileBuilder
from flameprof.model.counters import PAGE_FAULTS_PER_S, SYSTEM_CPU_PERCENT
from flameprof.model.profile import Frame, Mark

CALL = Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1782)


def _loop(layers: dict[str, float], backward: float = 0.0, steps: int = 6):
    """``steps`` steps with samples in each ``{layer name: seconds}`` (under ``Net``) and, for a
    training loop, ``backward`` seconds in ``Tensor.backward``."""
    b = ProfileBuilder({"duration": 0.0})
    main = b.thread_id(1, 1, "MainThread")
    net = Frame("Net", kind="layer")
    ids = {
        name: b.stack_id([b.frame(f) for f in (MODULE, CALL, net, CALL, Frame(name, kind="layer"))])
        for name in layers
    }
    back = b.stack_id([b.frame(MODULE), b.frame(Frame("Tensor.backward", TORCH + "_tensor.py", 566))])
    t = 0.0
    for _ in range(steps):
        b.marks.append(Mark(t, main, "step"))
        for name, seconds in layers.items():
            t += seconds
            b.add_sample(t, main, ids[name], seconds, seconds)
        if backward:
            t += backward
            b.add_sample(t, main, back, backward, backward)
    b.marks.append(Mark(t, main, "step"))
    return b.build()


def kinds(profile) -> dict[str, object]:
    return {a.kind: a for a in report_of(profile).graph_advice}


SEQUENTIAL = {
    "Net.features.0 (Conv2d)": 0.06,
    "Net.features.1 (BatchNorm2d)": 0.02,
    "Net.features.2 (ReLU)": 0.01,
}
NAMED = {"Net.block.conv1 (Conv2d)": 0.06, "Net.block.bn1 (BatchNorm2d)": 0.03}


@pytest.mark.parametrize(
    "layers, bn", [(SEQUENTIAL, "Net.features.1 (BatchNorm2d)"), (NAMED, "Net.block.bn1 (BatchNorm2d)")]
)
def test_batchnorm_after_a_convolution_folds_in_inference(layers, bn):
    advice = kinds(_loop(layers))["fold_batchnorm"]
    assert advice.layers == [bn]
    assert advice.seconds == pytest.approx(layers[bn]) and advice.saving == advice.seconds
    assert "fold each into the layer before it" in advice.text
    # a model that trains keeps its BatchNorm: nothing to fold
    assert "fold_batchnorm" not in kinds(_loop(layers, backward=0.1))


@pytest.mark.parametrize(
    "kernel, faults, caveat", [(40.0, 50_000.0, True), (2.0, 50_000.0, False), (40.0, 100.0, False)]
)
def test_folding_in_a_loop_that_faults_its_memory_afresh_says_the_saving_moves(kernel, faults, caveat):
    profile = _loop(SEQUENTIAL)
    times = np.linspace(0.0, 0.6, 13)
    profile.counters[SYSTEM_CPU_PERCENT] = (times, np.full(13, kernel))
    profile.counters[PAGE_FAULTS_PER_S] = (times, np.full(13, faults))
    advice = kinds(profile)["fold_batchnorm"]
    assert advice.saving == pytest.approx(SEQUENTIAL["Net.features.1 (BatchNorm2d)"])
    assert ("faults its memory in afresh each step (40% of its time in the kernel" in advice.text) is caveat
    plain = report_of(profile).verdict.advice
    assert any("faulted in again" in line for line in plain) is caveat  # the advice it refers to


def test_folding_names_the_batchnorms_only_the_traced_window_saw():
    profile = _loop(SEQUENTIAL)
    window = _window(
        [
            ("Net.features.3 (Conv2d)", "aten::convolution", 50),
            ("Net.features.4 (BatchNorm2d)", "aten::batch_norm", 5),
        ]
    )
    profile.trace = load_bytes(json.dumps(window).encode(), "t.json").trace
    advice = kinds(profile)["fold_batchnorm"]
    # no sample fell in the second BatchNorm: it folds all the same, its time is in the sampled total's error
    assert advice.layers == ["Net.features.1 (BatchNorm2d)", "Net.features.4 (BatchNorm2d)"]
    assert advice.seconds == pytest.approx(SEQUENTIAL["Net.features.1 (BatchNorm2d)"])


def test_batchnorm_without_a_convolution_before_it_is_not_folded():
    layers = {
        "Net.attn (MultiheadAttention)": 0.06,
        "Net.norm (BatchNorm1d)": 0.03,
        "Net.features.0 (BatchNorm2d)": 0.02,
    }
    assert "fold_batchnorm" not in kinds(_loop(layers))


def test_dropout_in_a_loop_without_backward():
    layers = {"Net.fc (Linear)": 0.08, "Net.drop (Dropout)": 0.02}
    advice = kinds(_loop(layers))["dropout_at_inference"]
    assert advice.layers == ["Net.drop (Dropout)"] and advice.saving == pytest.approx(0.02)
    assert "model.eval()" in advice.text
    assert "dropout_at_inference" not in kinds(_loop(layers, backward=0.1))
    assert "dropout_at_inference" not in kinds(_loop({"Net.fc (Linear)": 0.1, "Net.drop (Dropout)": 0.0005}))


def _window(ops: list[tuple[str, str, float]], dtype: str | None = None) -> dict:
    """A traced step of host ops, each ``(layer, op, microseconds)`` inside its layer's annotation,
    their inputs of ``dtype`` (none recorded: None)."""
    events, t = [_x("user_annotation", "ProfilerStep#0", 0, 1000)], 10.0
    inputs = {"Input Dims": [[8, 256]], **({"Input type": [dtype]} if dtype else {})}
    for layer, op, dur in ops:
        events.append(_x("user_annotation", f"flameprof.layer: {layer}", t, dur + 2))
        events.append(_x("cpu_op", op, t + 1, dur, **inputs))
        t += dur + 10
    return {"schemaVersion": 1, "traceEvents": events}


def test_copies_and_out_of_place_activations_in_the_traced_window():
    doc = _window(
        [
            ("Net.fc (Linear)", "aten::addmm", 400),
            ("Net.fc (Linear)", "aten::contiguous", 150),
            ("Net.act (ReLU)", "aten::relu", 50),
        ]
    )
    found = kinds(load_bytes(json.dumps(doc).encode(), "t.json"))
    copies = found["copies_in_step"]
    assert copies.layers == ["Net.fc (Linear)"] and copies.seconds == pytest.approx(150e-6)
    inplace = found["inplace_activation"]
    assert inplace.layers == ["Net.act (ReLU)"] and inplace.saving == 0.0
    assert inplace.saving_bytes == 4 * 8 * 256  # no dtype recorded: 4 bytes an element
    half = kinds(
        load_bytes(
            json.dumps(_window([("Net.act (ReLU)", "aten::relu", 50)], "c10::BFloat16")).encode(), "t.json"
        )
    )
    assert half["inplace_activation"].saving_bytes == 2 * 8 * 256
    clean = _window([("Net.fc (Linear)", "aten::addmm", 400), ("Net.act (ReLU)", "aten::relu_", 50)])
    assert not {"copies_in_step", "inplace_activation"} & set(
        kinds(load_bytes(json.dumps(clean).encode(), "t.json"))
    )


def test_out_of_place_elementwise_ops_in_a_loop_without_backward():
    doc = _window([("Net.block (Block)", "aten::add", 40), ("Net.block (Block)", "aten::mul_", 40)])
    found = kinds(load_bytes(json.dumps(doc).encode(), "t.json"))["inplace_elementwise"]
    assert found.layers == ["Net.block (Block)"] and found.seconds == pytest.approx(40e-6)
    assert found.saving == 0.0 and found.saving_bytes == 4 * 8 * 256  # aten::mul_ is in place already
    # in training autograd may need the inputs: no such advice once the window has a backward
    doc["traceEvents"].append(_x("cpu_op", "autograd::engine::evaluate_function: AddBackward0", 900, 20))
    doc["traceEvents"].append(_x("cpu_op", "aten::mul", 905, 10, **{"Input Dims": [[8, 256]]}))
    training = kinds(load_bytes(json.dumps(doc).encode(), "t.json"))
    assert "inplace_elementwise" not in training


def test_check_folding_folds_a_copy_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = ResNetish().eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    check = flameprof.check_folding(model, x, repeat=3)
    assert check.folded_layers == 9 and check.max_difference < 1e-4
    assert (
        check.original > 0
        and check.folded > 0
        and check.speedup == pytest.approx(check.original / check.folded)
    )
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 9
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="training mode"):
        flameprof.check_folding(model.train(), x)


HALF2 = ["c10::Half", "c10::Half"]
FLOAT2 = ["float", "float"]


def _gpu_window(
    ops: list[tuple[str, str, list, list, float]], major: int | None = 9, kernels: bool = True
) -> dict:
    """A traced step on a GPU of compute capability ``major`` (None: no ``deviceProperties``): each op
    ``(layer, op, input dims, input dtypes, kernel microseconds)`` launches one kernel."""
    events, t = [], 10.0
    for k, (layer, op, dims, types, kernel) in enumerate(ops):
        events.append(_x("user_annotation", f"flameprof.layer: {layer}", t, 30))
        events.append(_x("cpu_op", op, t + 1, 20, **{"Input Dims": dims, "Input type": types}))
        if kernels:
            events.append(_x("cuda_runtime", "cudaLaunchKernel", t + 5, 5, correlation=k + 1))
            events.append(_kernel("kernel", f"gemm_{k}", t + 40, kernel, k + 1))
        t += 40 + kernel
    events.insert(0, _x("user_annotation", "ProfilerStep#0", 0, t + 10))
    doc: dict = {"schemaVersion": 1, "traceEvents": events}
    if major is not None:
        doc["deviceProperties"] = [{"id": 0, "name": "GPU", "computeMajor": major, "computeMinor": 0}]
    return doc


def _gpu_advice(*args, **kwargs) -> dict[str, object]:
    return kinds(load_bytes(json.dumps(_gpu_window(*args, **kwargs)).encode(), "gpu.json"))


def test_misaligned_dimensions_of_matmuls_and_convolutions():
    assert misaligned("aten::mm", "[[64,50],[50,64]]") == {"K": 50}
    assert misaligned("aten::addmm", "[[60],[12,64],[64,60]]") == {"N": 60}  # not M: the rows that came
    assert misaligned("aten::bmm", "[[4,64,64],[4,64,64]]") == {}
    assert misaligned("aten::convolution", "[[8,3,32,32],[16,3,3,3],[16],[1,1],[0,0]]") == {"in channels": 3}
    assert misaligned("aten::relu", "[[64,50]]") == {} and misaligned("aten::mm", "") == {}


def test_half_precision_matmuls_whose_shapes_tensor_cores_do_not_take_whole():
    aligned = ("Net.body (Linear)", "aten::mm", [[64, 64], [64, 64]], HALF2, 100)
    head = ("Net.head (Linear)", "aten::mm", [[64, 50], [50, 64]], HALF2, 200)
    advice = _gpu_advice([aligned, head])["tensor_core_shapes"]
    assert advice.layers == ["Net.head (Linear)"] and advice.seconds == pytest.approx(200e-6)
    # measured against the aligned matmul's rate: 2*64*64*64 FLOPs in 100 us; the head's 2*64*50*64
    # would take 78.125 us at that rate
    assert advice.saving == pytest.approx(200e-6 - 78.125e-6)
    assert "K 50 (pad to 56)" in advice.text
    # with no aligned matmul to compare, half its time is assumed (and said)
    alone = _gpu_advice([head])["tensor_core_shapes"]
    assert alone.saving == pytest.approx(100e-6) and "assumed half" in alone.text
    # not for aligned shapes, fp32 (no tensor-core premise for these dims), or a CPU window
    assert "tensor_core_shapes" not in _gpu_advice([aligned, aligned])
    assert "tensor_core_shapes" not in _gpu_advice([(*head[:3], FLOAT2, 200)])
    assert "tensor_core_shapes" not in _gpu_advice([aligned, head], kernels=False)


def test_fp32_matmuls_on_a_gpu_that_runs_bf16():
    fp32 = ("Net.fc (Linear)", "aten::mm", [[64, 64], [64, 64]], FLOAT2, 300)
    advice = _gpu_advice([fp32], major=8)["bf16_matmuls"]
    assert advice.layers == ["Net.fc (Linear)"] and advice.seconds == pytest.approx(300e-6)
    assert advice.saving == pytest.approx(150e-6) and "compute capability 8.0" in advice.text
    # not before Ampere, not where the trace does not say, not for matmuls in half precision already
    assert "bf16_matmuls" not in _gpu_advice([fp32], major=7)
    assert "bf16_matmuls" not in _gpu_advice([fp32], major=None)
    assert "bf16_matmuls" not in _gpu_advice([(*fp32[:3], HALF2, 300)], major=9)
