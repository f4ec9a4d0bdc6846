"""Advice on the matmuls' and convolutions' dtypes and shapes in a traced window that ran on a GPU, from
the ``Input Dims`` and ``Input type`` torch.profiler records for each op and the device time of the
kernels each one launched:

- ``tensor_core_shapes``: half-precision (fp16, bf16) matmuls and convolutions with a dimension that
  is not a multiple of 8 (a matmul's K and N, set by the model: hidden sizes, a vocabulary; not M,
  the rows, which in inference is however many tokens came; a convolution's input and output
  channels), which tensor cores do not take whole (NVIDIA's guidance for fp16 and bf16: multiples
  of 8). The saving is measured against the window's aligned half-precision matmuls: each op's time
  less what its FLOPs take at their achieved rate; without one to compare, half its time is assumed.
- ``bf16_matmuls``: fp32 matmuls and convolutions on a device of compute capability 8.0 or later
  (Ampere on), which runs bf16 on tensor cores: autocast to bf16 (or TF32 for fp32 matmuls) moves
  half the bytes and runs at the tensor cores' rate; half their time is the saving estimated, the
  least that halving the bytes gives.

Neither is given for a window without a device: a CPU has no tensor cores.
"""

from __future__ import annotations

import numpy as np

from ..model.trace import DEVICE_KINDS, OP, Trace
from .ancestry import innermost
from .graph_advice import MIN_SHARE, GraphAdvice, as_ms
from .op_table import parse_list
from .ops import sums_by, window_seconds

HALF = ("c10::Half", "c10::BFloat16")
ALIGN = 8  # elements: what fp16 and bf16 tensor cores take whole
BF16_MAJOR = 8  # compute capability from which a GPU runs bf16 on tensor cores
# op -> positions in ``Input Dims`` of its two operands ([..., M, K] and [..., K, N]; input and weight)
_MATMULS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}
_CONVOLUTION = "aten::convolution"


def _is_shape(dims: object, rank: int) -> bool:
    return isinstance(dims, list) and len(dims) >= rank and all(type(v) is int for v in dims)


def misaligned(op: str, shapes: str) -> dict[str, int]:
    """The dimensions of a matmul (``K``, ``N``) or a convolution (``in channels``, ``out channels``)
    that are not multiples of ALIGN, by name; {} when all are, or the shapes are unknown."""
    dims = parse_list(shapes)
    if op in _MATMULS:
        i, j = _MATMULS[op]
        if len(dims) <= j or not (_is_shape(dims[i], 2) and _is_shape(dims[j], 2)):
            return {}
        named = {"K": dims[i][-1], "N": dims[j][-1]}
    elif op == _CONVOLUTION:
        if len(dims) < 2 or not (_is_shape(dims[0], 3) and _is_shape(dims[1], 3)):
            return {}
        named = {"in channels": dims[0][1], "out channels": dims[1][0]}
    else:
        return {}
    return {k: v for k, v in named.items() if v % ALIGN}


def device_time_of_ops(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per op in ``ops`` (event indexes), the seconds of the device events it launched: each device
    event goes to the nearest of ``ops`` among the host events around the runtime call that launched
    it."""
    ev = trace.events
    position = np.full(trace.num_events, -1, dtype=np.int64)
    position[ops] = np.arange(len(ops))
    nearest = innermost(ev["parent"], position)
    device = np.flatnonzero(np.isin(ev["kind"], DEVICE_KINDS) & (nearest >= 0))
    out: np.ndarray = np.bincount(nearest[device], weights=ev["dur"][device], minlength=len(ops))
    return out


def _distinct_rows(
    name: np.ndarray, shapes: np.ndarray, types: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique`` of the rows (name, shapes, types), ids below ``size`` (or -1), and each row's
    index among them: as two sorts of one number each (a sort of rows takes several times as long)."""
    pairs, pair = np.unique(name.astype(np.int64) * size + shapes + 1, return_inverse=True)
    keys, which = np.unique(pair.reshape(-1).astype(np.int64) * size + types + 1, return_inverse=True)
    at, types_of = np.divmod(keys, size)
    name_of, shapes_of = np.divmod(pairs[at], size)
    return np.stack([name_of, shapes_of - 1, types_of - 1], axis=1), which.reshape(-1)


def precision_advice(trace: Trace | None) -> list[GraphAdvice]:
    """The advice that holds for the traced window (none without a device)."""
    if trace is None or not np.isin(trace.events["kind"], DEVICE_KINDS).any():
        return []
    ev = trace.events
    steps = max(len(trace.steps), 1)
    step = window_seconds(trace) / steps
    names = {k for k, text in enumerate(trace.names) if text in _MATMULS or text == _CONVOLUTION}
    ops = np.flatnonzero((ev["kind"] == OP) & np.isin(ev["name"], list(names)))
    if not len(ops) or step <= 0:
        return []
    seconds = device_time_of_ops(trace, ops) / steps
    # the distinct (op, shapes, dtypes) once each
    distinct, which = _distinct_rows(
        ev["name"][ops], ev["shapes"][ops], ev["types"][ops], len(trace.names) + 1
    )
    first_type, off = [], []
    for name, shapes, types in distinct.tolist():
        dtypes = parse_list(trace.name_of(types))
        first_type.append(next((t for t in dtypes if isinstance(t, str) and t), ""))
        off.append(misaligned(trace.names[name], trace.name_of(shapes)))
    half = np.array([t in HALF for t in first_type])[which]
    fp32 = np.array([t == "float" for t in first_type])[which]
    bad = np.array([bool(m) for m in off])[which]
    flops = ev["flops"][ops] / steps
    layer_name = lambda k: trace.name_of(k) or "(no layer)"  # noqa: E731
    out = []
    wrong = half & bad
    cost = float(seconds[wrong].sum())
    if cost > 0 and cost >= MIN_SHARE * step:
        aligned = half & ~bad & (flops > 0) & (seconds > 0)
        if aligned.any():
            rate = float(flops[aligned].sum() / seconds[aligned].sum())
            saving = float(np.maximum(seconds[wrong] - flops[wrong] / rate, 0.0).sum())
            how = f"at the {rate / 1e12:.1f} TFLOP/s the window's aligned ones achieve"
        else:
            saving, how = cost / 2, "assumed half: no aligned half-precision matmul in the window to compare"
        by_layer = sums_by(ev["layer"][ops[wrong]], seconds[wrong], layer_name)
        layers = sorted(by_layer, key=lambda k: -by_layer[k])
        worst = max(np.unique(which[wrong]).tolist(), key=lambda k: float(seconds[which == k].sum()))
        dims = ", ".join(f"{k} {v} (pad to {-(-v // ALIGN) * ALIGN})" for k, v in off[worst].items())
        out.append(
            GraphAdvice(
                "tensor_core_shapes",
                layers,
                cost,
                saving,
                0.0,
                f"Half-precision matmuls and convolutions with dimensions that are not multiples of {ALIGN} "
                f"take {as_ms(cost)} of device time a traced step, most in {', '.join(layers[:3])} "
                f"({trace.names[int(distinct[worst][0])]}: {dims}): tensor cores take such shapes only in "
                f"part; pad them (a vocabulary, a hidden size, channels) to a multiple of {ALIGN}; saves "
                f"about {as_ms(saving)} a step ({how})",
            )
        )
    ran = np.unique(ev["device"][np.isin(ev["kind"], DEVICE_KINDS)]).tolist()
    capable = [trace.devices[d] for d in ran if d in trace.devices and trace.devices[d][1] >= BF16_MAJOR]
    cost = float(seconds[fp32].sum())
    if capable and len(capable) == len(ran) and cost > 0 and cost >= MIN_SHARE * step:
        by_layer = sums_by(ev["layer"][ops[fp32]], seconds[fp32], layer_name)
        layers = sorted(by_layer, key=lambda k: -by_layer[k])
        name, major, minor = capable[0]
        out.append(
            GraphAdvice(
                "bf16_matmuls",
                layers,
                cost,
                cost / 2,
                0.0,
                f"fp32 matmuls and convolutions take {as_ms(cost)} of device time a traced step, most in "
                f"{', '.join(layers[:3])}, on {name or 'a GPU'} (compute capability {major}.{minor}), "
                "which runs bf16 on tensor cores: run the forward under torch.autocast('cuda', "
                "dtype=torch.bfloat16), or let fp32 matmuls use TF32 "
                "(torch.set_float32_matmul_precision('high')); saves about "
                f"{as_ms(cost / 2)} a step (half: bf16 moves half the bytes; compute-bound ops gain more)",
            )
        )
    return out
