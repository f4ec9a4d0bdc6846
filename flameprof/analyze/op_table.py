"""The traced window's ops as one table, as MegEngine's ``profile_analyze`` prints it: per op (or op
type, or layer), calls, self and cumulative time (the device's when the window saw a device), FLOPs
and achieved FLOP/s, bytes moved and bandwidth, input and output shapes, and the layer.

Device time: a kernel, copy or fill is the self time of the op whose runtime call launched it, and
part of the cumulative time of every op around that one. Host time: an op's self time is its own
less its child ops', and part of the cumulative time of every op around it. A row (an op name, a
type or a layer) counts each moment once however its ops nest.
Bytes moved are the inputs' and the outputs' (``Input Dims`` and ``Input type`` as torch.profiler
records them; outputs inferred for the ops whose output shape follows from their inputs, with the
first input's dtype; an unknown dtype counts 4 bytes an element).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.trace import DEVICE_KINDS, OP, Trace
from .ops import op_times

AGGREGATES = ("name", "type", "layer")
ORDERS = ("time", "flops", "memory", "bandwidth")
_TYPES = (
    (
        "matmul",
        re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|einsum|_scaled_dot_product\w*)$"),
    ),
    ("convolution", re.compile(r"^aten::(\w*conv\w*)$")),
    ("normalization", re.compile(r"^aten::(native_)?(batch|layer|group|instance)_norm\w*$")),
    (
        "activation",
        re.compile(
            r"^aten::(relu|relu_|gelu|silu|silu_|sigmoid|tanh|hardtanh\w*|leaky_relu\w*|elu\w*|_?softmax|_?log_softmax)$"
        ),
    ),
    ("copy", re.compile(r"^aten::(copy_|to|_to_copy|contiguous|clone)$")),
    (
        "reduction",
        re.compile(r"^aten::(sum|mean|max|min|amax|amin|norm|linalg_vector_norm|argmax|argmin|prod)$"),
    ),
    (
        "elementwise",
        re.compile(
            r"^aten::(add|add_|sub|sub_|mul|mul_|div|div_|addcmul_|addcdiv_|sqrt|pow|exp|lerp_|neg|clamp\w*|where|abs)$"
        ),
    ),
)
_DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
}  # fmt: skip
_SAME_SHAPE = ("activation", "normalization", "elementwise", "copy")
# views: a new tensor over the same storage, no byte moved
_VIEWS = frozenset(
    "aten::" + name
    for name in ("view", "reshape", "_reshape_alias", "_unsafe_view", "t", "transpose", "permute", "expand",
                 "slice", "select", "unsqueeze", "squeeze", "as_strided", "alias", "split", "chunk", "narrow",
                 "unflatten", "flatten", "detach", "view_as", "expand_as", "unbind", "split_with_sizes")
)  # fmt: skip


@dataclass(frozen=True)
class OpTableRow:
    key: str  # the op's name, its type or its layer, as aggregated
    calls: int
    self: float  # seconds: the device's when ``OpTable.device_time``, else the host's
    total: float
    flops: float
    flops_per_s: float
    bytes: float
    bytes_per_s: float
    input_shapes: str  # the commonest
    output_shapes: str  # inferred; "" where it does not follow from the inputs
    layer: str  # the commonest


@dataclass(frozen=True)
class OpTable:
    aggregate_by: str
    order_by: str
    device_time: bool
    steps: int  # traced steps the times are over
    rows: list[OpTableRow]


def op_type(name: str) -> str:
    for kind, pattern in _TYPES:
        if pattern.match(name):
            return kind
    return "other"


def parse_list(text: str) -> list[Any]:
    """A recorded JSON list (shapes, dtypes), or [] where the text is none or not one."""
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def output_shape(name: str, dims: list[Any]) -> list[int] | None:
    """The output's shape where it follows from the inputs' (``dims``), else None."""
    shapes = [d for d in dims if isinstance(d, list) and all(isinstance(v, int) for v in d)]
    kind = op_type(name)
    if kind in _SAME_SHAPE and shapes and shapes[0]:
        return list(shapes[0])
    short = name.removeprefix("aten::")
    if short in ("mm", "addmm", "bmm", "baddbmm") and len(shapes) >= 2:
        a, b = (
            (shapes[1], shapes[2])
            if short.startswith(("addmm", "baddbmm")) and len(shapes) >= 3
            else shapes[:2]
        )
        if len(a) >= 2 and len(b) >= 2:
            return [*a[:-1], b[-1]]
    if short == "linear" and len(shapes) >= 2 and shapes[0] and len(shapes[1]) == 2:
        return [*shapes[0][:-1], shapes[1][0]]
    return None


def _elements(dims: object) -> float:
    """Elements of one recorded input: a shape (``[12, 64]``), a list of shapes (a tensor list, as
    ``aten::cat`` takes), or a scalar (``[]``: none counted)."""
    if not isinstance(dims, list) or not dims:
        return 0.0
    if all(isinstance(v, int) and not isinstance(v, bool) for v in dims):
        return float(math.prod(dims))
    return sum(_elements(d) for d in dims if isinstance(d, list))


def _sizes(types: str) -> list[int]:
    """Bytes an element of each input (4 where its dtype is unknown)."""
    return [_DTYPE_BYTES.get(t, 4) if isinstance(t, str) else 4 for t in parse_list(types)] or [4]


def first_input_bytes(shapes: str, types: str) -> float:
    """Bytes of an op's first input (as large as the output of an elementwise op)."""
    dims = parse_list(shapes)
    return _elements(dims[0]) * _sizes(types)[0] if dims else 0.0


def _bytes(name: str, shapes: str, types: str) -> tuple[float, str]:
    """Bytes of the inputs and the output, and the output's shape as text ("" when unknown); a view
    moves none."""
    if name in _VIEWS:
        return 0.0, ""
    dims, sizes = parse_list(shapes), _sizes(types)
    total = 0.0
    for k, d in enumerate(dims):
        total += _elements(d) * sizes[min(k, len(sizes) - 1)]
    out = output_shape(name, dims)
    if out is not None:
        total += math.prod(out) * sizes[0]
    return total, (str(out) if out is not None else "")


def op_table(
    trace: Trace,
    aggregate_by: str = "name",
    order_by: str = "time",
    top: int | None = None,
    min_time: float = 0.0,
    match: str | None = None,
) -> OpTable:
    """The table (``min_time``: seconds per traced step; ``match``: a regular expression the key
    must contain)."""
    if aggregate_by not in AGGREGATES or order_by not in ORDERS:
        raise ValueError(f"aggregate by {', '.join(AGGREGATES)}; order by {', '.join(ORDERS)}")
    ev = trace.events
    kind, parent, names = ev["kind"], ev["parent"], ev["name"]
    ops = np.flatnonzero(kind == OP)
    keys: list[str] = []
    group = np.full(trace.num_events, -1, dtype=np.int64)  # each op's row
    index: dict[str, int] = {}
    for i in ops.tolist():
        name = trace.names[int(names[i])]
        by = {
            "name": name,
            "type": op_type(name),
            "layer": trace.name_of(int(ev["layer"][i])) or "(no layer)",
        }
        k = index.setdefault(by[aggregate_by], len(keys))
        if k == len(keys):
            keys.append(by[aggregate_by])
        group[i] = k
    device = np.isin(kind, DEVICE_KINDS)
    self_s, total_s = np.zeros(len(keys)), np.zeros(len(keys))
    parents, kinds, groups = parent.tolist(), kind.tolist(), group.tolist()
    if device.any():  # each kernel to the op whose runtime call launched it, and to the ops around
        sources, weights = np.flatnonzero(device).tolist(), ev["dur"]
    else:  # each op's own time to it, its whole time to the rows of the ops around it
        sources, weights = ops.tolist(), op_times(trace).self_time
    for d in sources:
        p = d if not device.any() else parents[d]
        first, seen = True, set()
        while p >= 0:
            if kinds[p] == OP:
                if first:
                    self_s[groups[p]] += weights[d]
                    first = False
                if groups[p] not in seen:  # a row counts each moment once, however its ops nest
                    total_s[groups[p]] += weights[d]
                    seen.add(groups[p])
            p = parents[p]
    steps = max(len(trace.steps), 1)
    members_of: list[list[int]] = [[] for _ in keys]
    for i in ops.tolist():
        members_of[groups[i]].append(i)
    rows = []
    pattern = re.compile(match) if match else None
    for k, (key, members) in enumerate(zip(keys, members_of)):
        if pattern is not None and not pattern.search(key):
            continue
        own = float(self_s[k]) / steps
        if own < min_time:
            continue
        cumulative = float(total_s[k]) / steps
        flops = float(ev["flops"][members].sum()) / steps
        moved, inputs, outputs, layers = 0.0, Counter[str](), Counter[str](), Counter[str]()
        for i in members:
            shapes = trace.name_of(int(ev["shapes"][i]))
            dtypes = trace.name_of(int(ev["types"][i]))
            size, out = _bytes(trace.names[int(names[i])], shapes, dtypes)
            moved += size / steps
            inputs[shapes] += 1
            outputs[out] += 1
            layers[trace.name_of(int(ev["layer"][i])) or "(no layer)"] += 1
        busy = own if device.any() else cumulative
        rows.append(
            OpTableRow(
                key,
                len(members),
                own,
                cumulative,
                flops,
                flops / busy if busy > 0 else 0.0,
                moved,
                moved / busy if busy > 0 else 0.0,
                inputs.most_common(1)[0][0],
                outputs.most_common(1)[0][0],
                layers.most_common(1)[0][0],
            )
        )
    value = {"time": "self", "flops": "flops", "memory": "bytes", "bandwidth": "bytes_per_s"}[order_by]
    rows.sort(key=lambda r: -getattr(r, value))
    return OpTable(aggregate_by, order_by, bool(device.any()), len(trace.steps), rows[:top])
