"""What to change in the model's graph, and what it would save: from the layer paths (the module
structure) and what the profile measured of them, as Caffe's graph tools and TensorFlow's advisor
turned profiles into changes.

- ``fold_batchnorm``: a BatchNorm right after a convolution or a Linear (the next sibling in a
  ``Sequential``, or ``bnN`` after ``convN``) in a loop without backward: folded into the
  layer before it, its whole time goes (``flameprof.check_folding`` measures it on a copy). Where
  the loop faults its memory in afresh each step, folding also changes which allocations fault, by
  an amount no profile of the original shows (on flameprof.examples.resnet, 2.4 to 9.7 times
  BatchNorm's own time in five processes); the advice says so, after the advice to keep the memory;
- ``dropout_at_inference``: Dropout that takes time in a loop without backward (``model.eval()``
  makes it free);
- ``copies_in_step``: ``contiguous``, ``to`` and copy ops inside the forward and backward (traced
  window): layout changes and dtype conversions each step, whose time a different layout or dtype
  upstream saves;
- ``inplace_activation``: out-of-place ReLU-like ops in the traced window: in place, each saves its
  output's allocation (bytes from the input's shape and dtype);
- ``inplace_elementwise``: out-of-place add, sub, mul and div in a traced window without backward
  (in training, autograd may need their inputs): the same, where the first input is not used after.

Each names its layers and the time they cost per steady-state step, which is also the estimated
saving (none of it is left once the change is made), except in-place ops, which save
memory, not time. None is given where its premise does not hold (nothing to fold in a model that
trains).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES, PHASES
from ..model.trace import OP
from .advice import fresh_memory
from .breakdown import Analysis
from .op_table import first_input_bytes
from .ops import op_times, sums_by, window_seconds

MIN_SHARE = 0.01  # advice about less than this share of a step's time is left out
_LAYER = re.compile(r"^(?P<path>.*) \((?P<cls>[\w.]+)\)$")
_NORMS = re.compile(r"^BatchNorm[123]d$")
_FOLDS_INTO = re.compile(r"^(Conv[123]d|Linear)$")
_DROPOUT = re.compile(r"^(Alpha|FeatureAlpha)?Dropout[123]?d?$")
_COPIES = ("aten::contiguous", "aten::to", "aten::_to_copy", "aten::copy_", "aten::clone")
_ACTIVATIONS = ("aten::relu", "aten::relu6", "aten::hardtanh", "aten::leaky_relu", "aten::silu", "aten::elu")
_ELEMENTWISE = ("aten::add", "aten::sub", "aten::mul", "aten::div")


@dataclass(frozen=True)
class GraphAdvice:
    kind: str  # fold_batchnorm, dropout_at_inference, copies_in_step, inplace_activation,
    # inplace_elementwise (and precision_advice's tensor_core_shapes, bf16_matmuls)
    layers: list[str]
    seconds: float  # what they cost per steady-state step
    saving: float  # the estimated saving per step (seconds)
    saving_bytes: float  # memory an in-place activation saves per step, else 0
    text: str


def _split(name: str) -> tuple[str, str] | None:
    m = _LAYER.match(name)
    return (m["path"], m["cls"]) if m else None


def _predecessor(path: str, siblings: dict[str, str]) -> str | None:
    """The sibling a BatchNorm at ``path`` follows: index - 1 in a Sequential, else ``convN``/``fcN``
    for ``bnN``/``normN``."""
    parent, _, leaf = path.rpartition(".")
    prefix = f"{parent}." if parent else ""
    if leaf.isdigit():
        before = f"{prefix}{int(leaf) - 1}"
        return before if before in siblings else None
    number = re.sub(r"^\D*", "", leaf)
    for stem in ("conv", "fc", "linear"):
        candidate = f"{prefix}{stem}{number}"
        if candidate in siblings:
            return candidate
    return None


def as_ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f} ms"


def _training(analysis: Analysis) -> bool:
    back = [LEAF_PHASES.index("backward"), LEAF_PHASES.index("optimizer")]
    return bool(analysis.phase_seconds[back].sum() > 0)


def _structural(analysis: Analysis, names: list[str], per_step: np.ndarray, step: float) -> list[GraphAdvice]:
    """Folding and Dropout advice from the layer paths and their time per step."""
    if _training(analysis):
        return []
    classes: dict[str, str] = {}
    seconds: dict[str, float] = {}
    trace = analysis.profile.trace
    traced = [] if trace is None else [trace.names[k] for k in np.unique(trace.events["layer"]) if k >= 0]
    # the layers the samples met, with their time, and those only the traced window saw (no sample
    # fell in them: their time is in the sampled total's error)
    for name, s in [*zip(names, per_step.tolist()), *((name, 0.0) for name in traced)]:
        split = _split(name)
        if split and name not in seconds:
            classes[split[0]] = split[1]
            seconds[name] = s
    out = []
    folds = []
    for path, cls in classes.items():
        if _NORMS.match(cls):
            before = _predecessor(path, classes)
            if before is not None and _FOLDS_INTO.match(classes[before]):
                folds.append((f"{before} ({classes[before]})", f"{path} ({cls})"))
    fold_s = sum(seconds[bn] for _, bn in folds)
    if folds and fold_s >= MIN_SHARE * step:
        pairs = ", ".join(f"{bn} into {conv}" for conv, bn in folds[:3]) + (", ..." if len(folds) > 3 else "")
        faulting = fresh_memory(analysis)
        caveat = (
            f"; this loop faults its memory in afresh each step ({100 * faulting[0]:.0f}% of its time in "
            "the kernel: keep the memory first, as advised above): until then folding also moves those "
            "faults, by an amount no profile of the original shows, from none to most of them"
            if faulting
            else ""
        )
        out.append(
            GraphAdvice(
                "fold_batchnorm",
                [bn for _, bn in folds],
                fold_s,
                fold_s,
                0.0,
                f"{len(folds)} BatchNorm layer(s) follow a convolution or Linear in a loop without backward "
                f"and take {as_ms(fold_s)} a step ({100 * fold_s / step:.1f}%): fold each into the layer "
                f"before it ({pairs}) with torch.fx.experimental.optimization.fuse(model.eval()); saves "
                f"about {as_ms(fold_s)} a step (flameprof.check_folding(model, batch) measures it on a copy)"
                + caveat,
            )
        )
    drops = [n for n in seconds if (s := _split(n)) and _DROPOUT.match(s[1]) and seconds[n] > 0]
    drop_s = sum(seconds[n] for n in drops)
    if drops and drop_s >= MIN_SHARE * step:
        out.append(
            GraphAdvice(
                "dropout_at_inference",
                drops,
                drop_s,
                drop_s,
                0.0,
                f"Dropout runs in a loop without backward: {len(drops)} layer(s), {as_ms(drop_s)} a step "
                f"({100 * drop_s / step:.1f}%); call model.eval() (Dropout is free in eval mode) and run "
                f"under torch.inference_mode(): saves about {as_ms(drop_s)} a step",
            )
        )
    return out


def _traced(analysis: Analysis) -> list[GraphAdvice]:
    """Copies and out-of-place activations and elementwise ops inside the steps of the traced window
    (shares of its traced step)."""
    trace = analysis.profile.trace
    if trace is None or not trace.num_events:
        return []
    ev = trace.events
    steps = max(len(trace.steps), 1)
    step = window_seconds(trace) / steps
    self_time = op_times(trace).self_time
    compute = np.isin(ev["phase"], (PHASES.index("forward"), PHASES.index("backward")))
    ops = np.flatnonzero((ev["kind"] == OP) & compute)
    name = ev["name"][ops]
    copy_ids = [k for k, text in enumerate(trace.names) if text in _COPIES]
    layer_name = lambda k: trace.name_of(k) or "(no layer)"  # noqa: E731
    copying = np.isin(name, copy_ids)
    copies = sums_by(ev["layer"][ops[copying]], self_time[ops[copying]] / steps, layer_name)

    def out_of_place(names: tuple[str, ...]) -> dict[str, list[float]]:
        """Per layer, the seconds a traced step of the ops named ``names`` and the bytes of their
        outputs (each as large as its first input)."""
        ids = [k for k, text in enumerate(trace.names) if text in names]
        acting = ops[np.isin(name, ids)]
        inputs, input_of = np.unique(
            np.stack([ev["shapes"][acting], ev["types"][acting]]), axis=1, return_inverse=True
        )
        size = np.array([first_input_bytes(trace.name_of(a), trace.name_of(b)) for a, b in inputs.T.tolist()])
        seconds = sums_by(ev["layer"][acting], ev["dur"][acting] / steps, layer_name)  # with what they call
        per_op = size[input_of.reshape(-1)] / steps if len(acting) else size
        sizes = sums_by(ev["layer"][acting], per_op, layer_name)
        return {layer: [seconds[layer], sizes[layer]] for layer in seconds}

    activations = out_of_place(_ACTIVATIONS)
    inference = not (ev["phase"][ops] == PHASES.index("backward")).any()
    elementwise = out_of_place(_ELEMENTWISE) if inference else {}
    out = []
    copy_s = sum(copies.values())
    if copy_s > 0 and copy_s >= MIN_SHARE * step:
        top = sorted(copies, key=lambda k: -copies[k])
        out.append(
            GraphAdvice(
                "copies_in_step",
                top,
                copy_s,
                copy_s,
                0.0,
                f"Layout changes and dtype conversions (contiguous, to, copy_) take {as_ms(copy_s)} a traced "
                f"step in forward and backward, most in {', '.join(top[:3])}: keep tensors in the layout and "
                f"dtype their consumers want (channels_last end to end, one autocast region); saves about "
                f"{as_ms(copy_s)} a step",
            )
        )
    for kind, found, what, how in (
        (
            "inplace_activation",
            activations,
            "activations",
            "inplace=True (where the input is not needed for backward)",
        ),
        (
            "inplace_elementwise",
            elementwise,
            "elementwise ops (add, sub, mul, div)",
            "x.add_(y) and the like where x is not used after",
        ),
    ):
        if not found:
            continue
        layers = sorted(found, key=lambda k: -found[k][1])
        seconds = sum(v[0] for v in found.values())
        saved = sum(v[1] for v in found.values())
        out.append(
            GraphAdvice(
                kind,
                layers,
                seconds,
                0.0,
                saved,
                f"{len(layers)} layer(s) run {what} out of place ({as_ms(seconds)} a traced step), most in "
                f"{', '.join(layers[:3])}: {how} saves an allocation of about {saved / 1e6:.1f} MB a step, "
                "not time",
            )
        )
    return out


def graph_advice(
    analysis: Analysis, names: list[str], per_step: np.ndarray, step: float
) -> list[GraphAdvice]:
    """The advice for a profile: ``names`` and ``per_step`` are its layers and their self seconds per
    steady-state step (``step_detail.StepLayers``), ``step`` the steady-state step's seconds (0
    without steps: no advice from the samples)."""
    sampled = _structural(analysis, names, per_step, step) if step > 0 else []
    return sampled + _traced(analysis)
