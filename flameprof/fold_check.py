"""``flameprof.check_folding(model, *inputs)``: what folding BatchNorm into the layers before it
saves, measured on a copy of the model (the program's own model is never touched).

The report's ``fold_batchnorm`` advice estimates the saving from the profile (the BatchNorm layers'
time per step); this measures it: ``torch.fx.experimental.optimization.fuse`` folds a deep copy,
then the copy's forward and the original's run alternately on the same inputs under
``torch.inference_mode``, and the medians and the largest output difference are returned.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

WARMUP = 3


@dataclass(frozen=True)
class FoldCheck:
    original: float  # median seconds of the original model's forward
    folded: float  # of the folded copy's
    max_difference: float  # the largest absolute difference between their outputs
    folded_layers: int  # BatchNorm layers the copy no longer has

    @property
    def saving(self) -> float:
        return self.original - self.folded

    @property
    def speedup(self) -> float:
        return self.original / self.folded if self.folded > 0 else 0.0


def _outputs(value: Any) -> list[Any]:
    """The tensors of a forward's result (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _outputs(v)]
    return [value] if hasattr(value, "detach") else []


def check_folding(model: Any, *inputs: Any, repeat: int = 30) -> FoldCheck:
    """Fold a copy of ``model`` (in eval mode) and time both forwards on ``inputs``, ``repeat`` times
    each, alternated. ValueError for a model in training mode or one torch.fx cannot trace."""
    import torch
    from torch.fx.experimental.optimization import fuse

    if model.training:
        raise ValueError("the model is in training mode: BatchNorm folds only after model.eval()")
    try:
        folded = fuse(model)  # a deep copy: fuse's default
    except Exception as exc:  # torch.fx cannot trace every model (data-dependent control flow)
        raise ValueError(f"torch.fx could not trace the model to fold it: {exc}") from None
    norms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)

    def count(m: Any) -> int:
        return sum(isinstance(x, norms) for x in m.modules())

    times: dict[int, list[float]] = {0: [], 1: []}
    with torch.inference_mode():
        expected, got = _outputs(model(*inputs)), _outputs(folded(*inputs))
        difference = max((float((a - b).abs().max()) for a, b in zip(expected, got)), default=0.0)
        for k in range(WARMUP + repeat):
            for which, m in enumerate((model, folded)):
                t0 = time.perf_counter()
                m(*inputs)
                if k >= WARMUP:
                    times[which].append(time.perf_counter() - t0)
    return FoldCheck(
        statistics.median(times[0]), statistics.median(times[1]), difference, count(model) - count(folded)
    )
