"""Differential profiles: how a NEW profile differs from a BASE, per call path and per function,
layer and phase.

Call paths are matched by their labels root first, so a ``.flameprof`` and a folded file of the
same program compare. The NEW tree keeps its shape (the differential graph is sized by NEW) and
gets the BASE's weights of the same paths as columns. With ``normalize``, BASE weights are scaled
to NEW's total, so changes are changes of share rather than of absolute time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from .breakdown import analyze
from .tree import CallTree, build_tree, match_paths

BASE_TOTAL = "base_total"
BASE_SELF = "base_self"


def diff_tree(
    base: Profile, new: Profile, mode: str = "wall", view: str = "code", normalize: bool = False
) -> CallTree:
    """NEW's call tree with columns ``base_total`` and ``base_self``: BASE's weights of the same paths
    (0 where BASE never took that path), scaled to NEW's total when ``normalize``."""
    new_tree = build_tree(new, mode, view)
    base_tree = build_tree(base, mode, view)
    match = match_paths(new_tree, base_tree)
    found = match >= 0
    scale = 1.0
    if normalize and base_tree.total[0] > 0:
        scale = float(new_tree.total[0]) / float(base_tree.total[0])
    for name, column in ((BASE_TOTAL, base_tree.total), (BASE_SELF, base_tree.self_weight)):
        values = np.zeros(len(new_tree))
        values[found] = column[match[found]] * scale
        new_tree.columns[name] = values
    return new_tree


@dataclass
class Change:
    """One function, layer or phase: its weight in BASE and NEW (shares of each total when normalized)."""

    kind: str  # function, layer or phase
    name: str
    base_self: float
    new_self: float
    base_total: float
    new_total: float

    @property
    def delta(self) -> float:
        return self.new_total - self.base_total

    @property
    def delta_self(self) -> float:
        return self.new_self - self.base_self


def changes(base: Profile, new: Profile, mode: str = "wall", normalize: bool = False) -> list[Change]:
    """Every function (all threads, in ``mode``), layer and leaf phase (the loop thread, wall time)
    with its BASE and NEW weights; with ``normalize``, as fractions of each profile's total."""
    a, b = analyze(base, mode=mode, top=None), analyze(new, mode=mode, top=None)
    out: list[Change] = []

    def scales(total_a: float, total_b: float) -> tuple[float, float]:
        if not normalize:
            return 1.0, 1.0
        return (1.0 / total_a if total_a > 0 else 0.0), (1.0 / total_b if total_b > 0 else 0.0)

    for kind, rows_a, rows_b, sa, sb in (
        ("function", a.functions, b.functions, *scales(a.function_total, b.function_total)),
        ("layer", a.layers, b.layers, *scales(a.loop_seconds, b.loop_seconds)),
    ):
        before = {r.name: r for r in rows_a}
        after = {r.name: r for r in rows_b}
        for name in sorted(set(before) | set(after)):
            ra, rb = before.get(name), after.get(name)
            out.append(
                Change(
                    kind,
                    name,
                    ra.self_s * sa if ra else 0.0,
                    rb.self_s * sb if rb else 0.0,
                    ra.total_s * sa if ra else 0.0,
                    rb.total_s * sb if rb else 0.0,
                )
            )
    sa, sb = scales(a.loop_seconds, b.loop_seconds)
    for i, name in enumerate(LEAF_PHASES):
        pa, pb = float(a.phase_seconds[i]) * sa, float(b.phase_seconds[i]) * sb
        if pa or pb:
            out.append(Change("phase", name, pa, pb, pa, pb))
    return out


def largest(items: list[Change], kind: str, limit: int = 10) -> tuple[list[Change], list[Change]]:
    """The ``limit`` largest regressions (growth, largest first) and improvements of ``kind``."""
    rows = [
        c for c in items if c.kind == kind and abs(c.delta) > 1e-9 * max(c.base_total, c.new_total)
    ]  # not noise
    grown = sorted((c for c in rows if c.delta > 0), key=lambda c: (-c.delta, c.name))[:limit]
    shrunk = sorted((c for c in rows if c.delta < 0), key=lambda c: (c.delta, c.name))[:limit]
    return grown, shrunk
