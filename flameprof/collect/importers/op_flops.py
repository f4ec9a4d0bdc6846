"""FLOPs of the ops that dominate training, from their input shapes (as torch.profiler records them).

Counted where exactly one op of a call chain carries them, so nested ops never count twice:
``aten::mm``/``addmm``/``bmm``/``baddbmm``/``addbmm`` (a Linear's forward and both its backward
products) and ``aten::convolution`` (every ConvNd's forward) and ``aten::convolution_backward``
(the input and weight gradients it was asked for). A multiply-add is two FLOPs, as torch counts.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence

Dims = Sequence[Sequence[int]]


def _prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)


def _ints(text: str, size: int) -> list[int]:
    """A recorded int list (``'[2, 2]'``), or ``'1'`` repeated ``size`` times."""
    try:
        value = ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * size
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value if len(value) == size else ([value[0]] * size if len(value) == 1 else [])
    return []


def _matmul(name: str, dims: Dims) -> float:
    shapes = [list(d) for d in dims if isinstance(d, list) and d]
    if name == "aten::mm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2.0 * m * k * n
    if name == "aten::addmm" and len(shapes) >= 3 and len(shapes[1]) == 2 and len(shapes[2]) == 2:
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2.0 * m * k * n
    if name == "aten::bmm" and len(shapes) >= 2 and len(shapes[0]) == 3 and len(shapes[1]) == 3:
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return 2.0 * b * m * k * n
    if name in ("aten::baddbmm", "aten::addbmm") and len(shapes) >= 3:
        if len(shapes[1]) == 3 and len(shapes[2]) == 3:
            (b, m, k), (_, _, n) = shapes[1], shapes[2]
            return 2.0 * b * m * k * n
    return 0.0


def _conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return max(0, (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1)


def _convolution(dims: Dims, concrete: Sequence[str]) -> float:
    if len(dims) < 2 or len(concrete) < 9 or len(dims[0]) < 3 or len(dims[0]) != len(dims[1]):
        return 0.0
    if concrete[6] not in ("False", "0"):  # transposed convolutions are left uncounted
        return 0.0
    x, w = dims[0], dims[1]
    spatial = len(x) - 2
    stride, padding, dilation = (_ints(concrete[i], spatial) for i in (3, 4, 5))
    if not (stride and padding and dilation):
        return 0.0
    out = [_conv_out(x[2 + i], w[2 + i], stride[i], padding[i], dilation[i]) for i in range(spatial)]
    return 2.0 * x[0] * w[0] * _prod(out) * w[1] * _prod(w[2:])


def _convolution_backward(dims: Dims, concrete: Sequence[str]) -> float:
    if len(dims) < 3 or len(dims[0]) < 3 or len(dims[2]) != len(dims[0]):
        return 0.0
    grad_out, w = dims[0], dims[2]
    one = 2.0 * grad_out[0] * w[0] * _prod(grad_out[2:]) * w[1] * _prod(w[2:])
    mask = [True, True, True]
    if len(concrete) > 10 and concrete[10]:
        try:
            value = ast.literal_eval(concrete[10])
            mask = [bool(v) for v in value] if isinstance(value, list) else mask
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return one * sum(mask[:2])


def op_flops(name: str, dims: object, concrete: object) -> float:
    """FLOPs of one call of op ``name`` with input shapes ``dims`` (0 when it is not counted here)."""
    if not isinstance(dims, list):
        return 0.0
    try:
        if not all(isinstance(d, list) and all(isinstance(v, int) and v >= 0 for v in d) for d in dims):
            return 0.0
        concrete = [str(c) for c in concrete] if isinstance(concrete, list) else []
        if name == "aten::convolution":
            return _convolution(dims, concrete)
        if name == "aten::convolution_backward":
            return _convolution_backward(dims, concrete)
        return _matmul(name, dims)
    except (IndexError, ZeroDivisionError, OverflowError):
        return 0.0
