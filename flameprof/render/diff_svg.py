"""The differential flame graph: NEW's flame graph, each frame coloured by how its time changed from BASE.

Red frames grew, blue ones shrank, the stronger the larger the change of the frame's total (itself
and everything it called), so a frame whose callees grew is coloured even when its own self time
did not change. The tooltip gives the change of both total and self time. Drawing is svg.py's,
through its ``Paint`` extension point.
"""

from __future__ import annotations

import colorsys

import numpy as np

from ..analyze.diff import BASE_SELF, BASE_TOTAL, diff_tree
from ..analyze.tree import CallTree
from ..model.profile import Profile
from .svg import Paint, tree_svg

STEPS = 8  # colour intensities per direction


def _shades(letter: str, hue: float) -> str:
    rules = []
    for k in range(1, STEPS + 1):
        r, g, b = colorsys.hls_to_rgb(hue / 360, 0.92 - 0.44 * k / STEPS, 0.85)
        rules.append(f".{letter}{k}{{fill:#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}}}")
    return "".join(rules)


_CSS = _shades("g", 2) + _shades("b", 218) + ".z{fill:#dcdcd6}"


def _amount(value: float, unit: str, normalized_total: float | None) -> str:
    if normalized_total is not None:
        return f"{100 * value / normalized_total:+.2f} pp" if normalized_total else "+0 pp"
    if unit == "count":
        return f"{value:+.0f} samples"
    return f"{value * 1e3:+.1f} ms"


def _relative(delta: float, base: float) -> str:
    return f"{100 * delta / base:+.0f}%" if base > 0 else ("new" if delta > 0 else "+0%")


def diff_paint(normalize: bool):
    """The Paint callback: classes by sign and size of each frame's total change, notes with both changes."""

    def paint(tree: CallTree) -> Paint:
        base_total, base_self = tree.columns[BASE_TOTAL], tree.columns[BASE_SELF]
        delta = tree.total - base_total
        delta_self = tree.self_weight - base_self
        tiny = 1e-9 * max(float(tree.total[0]), 1e-300)  # rounding noise, e.g. of a normalized BASE
        delta[np.abs(delta) <= tiny] = 0.0
        delta_self[np.abs(delta_self) <= tiny] = 0.0
        biggest = float(np.abs(delta[1:]).max()) if len(tree) > 1 else 0.0
        level = np.zeros(len(tree), dtype=np.int64)
        if biggest > tiny:
            level = np.clip(np.ceil(np.abs(delta) / biggest * STEPS), 1, STEPS).astype(np.int64)
        classes = [
            ("g" if d > 0 else "b") + str(k) if d else "z" for d, k in zip(delta.tolist(), level.tolist())
        ]
        shown_total = float(tree.total[0]) if normalize else None
        notes = []
        for d, ds, bt, bs in zip(
            delta.tolist(), delta_self.tolist(), base_total.tolist(), base_self.tolist()
        ):
            what = "share" if normalize else "total"
            notes.append(
                f"{what} {_amount(d, tree.unit, shown_total)} ({_relative(d, bt)}), "
                f"self {_amount(ds, tree.unit, shown_total)} ({_relative(ds, bs)})"
            )
        return Paint(
            classes, notes, _CSS, [(f"g{STEPS}", "grew"), (f"b{STEPS}", "shrank"), ("z", "unchanged")]
        )

    return paint


def render_diff_svg(
    base: Profile,
    new: Profile,
    *,
    mode: str = "wall",
    view: str = "code",
    normalize: bool = False,
    title: str | None = None,
    minwidth: float = 0.1,
    icicle: bool = False,
) -> str:
    """The differential flame graph of NEW against BASE."""
    tree = diff_tree(base, new, mode, view, normalize)
    new_total, base_total = float(tree.total[0]), float(tree.columns[BASE_TOTAL][0])
    if normalize:
        subtitle = f"shares of each profile compared ({mode} time); sized by NEW, red grew, blue shrank"
    elif tree.unit == "count":
        subtitle = (
            f"NEW {new_total:.0f} samples vs BASE {base_total:.0f} "
            f"({_relative(new_total - base_total, base_total)}); "
            "red grew, blue shrank"
        )
    else:
        subtitle = (
            f"NEW {new_total:.3f} s vs BASE {base_total:.3f} s of {mode} time "
            f"({_relative(new_total - base_total, base_total)}); red grew, blue shrank"
        )
    return tree_svg(
        tree,
        title=title or "Differential flame graph",
        subtitle=subtitle,
        minwidth=minwidth,
        icicle=icicle,
        paint=diff_paint(normalize),
    )
