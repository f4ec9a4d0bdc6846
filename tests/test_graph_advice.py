"""Graph advice (analyze/graph_advice.py): each piece against a profile that triggers it and one
that must not, and the folding it proposes measured on a copy of a ResNet-style CNN
(flameprof.check_folding)."""

from __future__ import annotations

import json

import pytest
import torch
from kineto_traces import _x
from test_report import MODULE, TORCH
from torch import nn

import flameprof
from flameprof.analyze.report import report_of
from flameprof.collect.importers.load import load_bytes
from flameprof.examples.resnet import ResNetish
from flameprof.model.builder import ProfileBuilder
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


def _window(ops: list[tuple[str, str, float]]) -> dict:
    """A traced step of host ops, each ``(layer, op, microseconds)`` inside its layer's annotation."""
    events, t = [_x("user_annotation", "ProfilerStep#0", 0, 1000)], 10.0
    for layer, op, dur in ops:
        events.append(_x("user_annotation", f"flameprof.layer: {layer}", t, dur + 2))
        events.append(_x("cpu_op", op, t + 1, dur, **{"Input Dims": [[8, 256]]}))
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
    assert inplace.saving_bytes == 4 * 8 * 256
    clean = _window([("Net.fc (Linear)", "aten::addmm", 400), ("Net.act (ReLU)", "aten::relu_", 50)])
    assert not {"copies_in_step", "inplace_activation"} & set(
        kinds(load_bytes(json.dumps(clean).encode(), "t.json"))
    )


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
