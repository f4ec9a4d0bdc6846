"""The interactive flame graph: one self-contained SVG file that also reads well without its script.

Frames are ``<rect>`` elements inside a nested ``<svg>`` whose x axis is in weight units (``UNITS`` for the
whole profile), so the file carries each frame's position once and a zoom is just a new ``viewBox``; the
frames of one stack level are in one ``<g>`` whose transform gives their y.
The per-frame data the script needs is in short attributes (``n`` the name, ``s`` the sample count);
the script computes tooltips, labels after a zoom, and search matches from them. No user text is ever
written inside the script: names only appear XML-escaped in attributes and text nodes.
"""

from __future__ import annotations

import colorsys
import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from ..analyze.phase_tree import dominant_phases, phase_tree
from ..analyze.phases import Rule
from ..analyze.tree import CallTree, build_tree
from ..model.frames import CATEGORIES, category
from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from .asset_files import asset

WIDTH = 1200  # pixels, as flamegraph.pl
XPAD = 10
FRAME_H = 16  # one stack level: a 15 px frame and a 1 px gap
TOP = 56  # title, subtitle and buttons
BOTTOM = 36  # legend and search result
UNITS = 10_000_000  # x units of the whole profile: exact in the float32 geometry of browsers
CHAR_W = 7  # average width of a 12 px Verdana character
SHADES = 4  # colour variants per kind of code, picked by a hash of the name
COLORS = ("kind", "phase")  # what frames are coloured by
PHASE_COLORS = {
    "data.wait": "#d9534f",
    "data.fetch": "#f0ad4e",
    "forward": "#5b9bd5",
    "backward": "#7e57c2",
    "optimizer": "#4caf50",
    "sync": "#ff7043",
    "comm": "#26a69a",
    "eval": "#8d6e63",
    "checkpoint": "#78909c",
    "other": "#b0b0a8",
}
PHASE_IDS = {name: i for i, name in enumerate(LEAF_PHASES)}
BYPHASE = ' class="byphase"'
HIDDEN = ' style="display:none"'

# Kind of code -> (class letter, hue, saturation, lightness); "your code" warm, libraries and runtime cooler.
_KINDS = {
    "user": ("u", 30, 0.90, 0.60),
    "library": ("l", 52, 0.80, 0.56),
    "torch": ("t", 352, 0.70, 0.66),
    "stdlib": ("s", 205, 0.50, 0.68),
    "native": ("n", 268, 0.40, 0.72),
    "scope": ("c", 320, 0.55, 0.76),
    "layer": ("y", 165, 0.45, 0.58),
    "process": ("p", 0, 0.0, 0.76),
    "marker": ("m", 60, 0.10, 0.84),
}
_NAMES = {
    "user": "your code",
    "library": "library",
    "torch": "PyTorch",
    "stdlib": "standard library",
    "native": "native",
    "scope": "scope",
    "layer": "layer",
    "process": "process/thread",
    "marker": "marker",
}

# XML text and attribute escaping in one pass; characters XML 1.0 forbids become U+FFFD.
_ESCAPE = {
    ord("&"): "&amp;",
    ord("<"): "&lt;",
    ord(">"): "&gt;",
    ord('"'): "&quot;",
    ord("\t"): "&#9;",
    ord("\n"): "&#10;",
    ord("\r"): "&#13;",
}
_ESCAPE.update({c: "\ufffd" for c in range(0x20) if c not in (9, 10, 13)})
_ESCAPE.update({c: "\ufffd" for c in range(0xD800, 0xE000)})
_ESCAPE.update({0xFFFE: "\ufffd", 0xFFFF: "\ufffd"})


_NEEDS_ESCAPE = re.compile('[&<>"\x00-\x1f\ud800-\udfff\ufffe\uffff]')


def escape(text: str) -> str:
    """``text`` safe inside an XML attribute value or text node."""
    return text.translate(_ESCAPE) if _NEEDS_ESCAPE.search(text) else text


@dataclass
class Paint:
    """Colours and tooltip notes a caller chooses instead of colouring by kind of code (the differential
    graph does): per node of the tree being drawn, a CSS class and a tooltip line; the CSS rules for
    those classes; and the legend entries as (class, text)."""

    classes: list[str]
    notes: list[str]
    css: str
    legend: list[tuple[str, str]]


def render_svg(
    profile: Profile,
    *,
    mode: str = "wall",
    view: str = "code",
    title: str | None = None,
    minwidth: float = 0.1,
    icicle: bool = False,
    color: str = "kind",
    rules: Sequence[Rule] = (),
    phases: bool = False,
) -> str:
    """The flame graph of ``profile`` weighted by ``mode`` (wall, cpu or samples) in ``view``, its frames
    coloured by kind of code or (``color`` ``phase``) by the phase of their samples (``rules``: as
    ``phase_tree``). ``phases``: the phase colours are in the file for a page to switch to."""
    by_phase = color == "phase"
    tree = phase_tree(profile, mode, view, rules) if by_phase or phases else build_tree(profile, mode, view)
    return flame_svg(tree, mode, view, title, minwidth, icicle, color, phases)


def flame_svg(
    tree: CallTree,
    mode: str = "wall",
    view: str = "code",
    title: str | None = None,
    minwidth: float = 0.1,
    icicle: bool = False,
    color: str = "kind",
    phases: bool = False,
) -> str:
    """The flame graph of a call tree built for ``mode`` and ``view`` (``render_svg``'s drawing, for a
    caller that keeps the tree). The phase colours are in the file when frames are coloured by phase
    or ``phases`` asks for them (and the tree has phase columns: ``phase_tree``)."""
    if color not in COLORS:
        raise ValueError(f"unknown colouring {color!r} (expected one of {', '.join(COLORS)})")
    by_phase = color == "phase"
    if title is None:
        title = "Icicle graph" if icicle else "Flame graph"
    return tree_svg(
        tree,
        title=title,
        subtitle=_subtitle(tree, mode, view),
        minwidth=minwidth,
        icicle=icicle,
        by_phase=by_phase,
        phases=by_phase or phases,
    )


def tree_svg(
    tree: CallTree,
    *,
    title: str,
    subtitle: str = "",
    minwidth: float = 0.1,
    icicle: bool = False,
    paint: Callable[[CallTree], Paint] | None = None,
    by_phase: bool = False,
    phases: bool = True,
) -> str:
    """Draw ``tree``; frames narrower than ``minwidth`` pixels (and so all they called) are left out.
    ``paint`` is called with the tree as drawn (after that pruning) and decides colours and notes.
    A tree with phase columns (``phase_tree``) gives every frame its heaviest phase, shown instead of
    the kind of code when ``by_phase`` or once a page adds the class ``byphase`` to ``#f``; with
    ``phases`` False the drawing leaves its phase columns out."""
    total = float(tree.total[0])
    inner = WIDTH - 2 * XPAD
    if total > 0:
        tree = tree.prune(max(minwidth, 0.0) / inner * total)
    start = tree.offsets()
    # shares of the total first: UNITS / total overflows for a tiny (subnormal) total
    divisor = total if total > 0 else math.inf
    left = np.rint(start / divisor * UNITS).astype(np.int64)
    width = np.rint((start + tree.total) / divisor * UNITS).astype(np.int64) - left
    shown = np.flatnonzero(width > 0)
    if not len(shown):  # nothing has any weight: the root alone, with no width
        shown = np.zeros(1, dtype=np.int64)
    depth = tree.depth[shown]
    levels = int(depth.max()) + 1
    frames_h = levels * FRAME_H
    height = TOP + frames_h + BOTTOM
    y = depth * FRAME_H if icicle else (levels - 1 - depth) * FRAME_H
    if paint is None:
        frame_ids = tree.frame[shown].tolist()
        classes, used = _classes(tree, set(frame_ids) - {-1})
        node_class = [classes[f] if f >= 0 else "r" for f in frame_ids]
        entries = [(f"{_KINDS[k][0]}1", _NAMES[k]) for k in used]
        css, notes = _css(used), None
    else:
        painted = paint(tree)
        node_class = [painted.classes[i] for i in shown.tolist()]
        css, entries = asset("flamegraph.css") + painted.css, painted.legend
        notes = [f' d="{escape(painted.notes[i])}"' for i in shown.tolist()]
    label_list = [tree.label(i) for i in shown.tolist()]
    names = [escape(t) for t in label_list]
    counted = tree.unit == "count"
    counts = [_number(v) for v in (tree.total if counted else tree.samples)[shown].tolist()]
    xs, ws, ys = left[shown].tolist(), width[shown].tolist(), y.tolist()
    phase_names, heaviest = dominant_phases(tree) if phases else ([], tree.depth)
    if phase_names:
        ids = [PHASE_IDS[phase_names[k]] for k in heaviest.tolist()]
        phase_attr = [f' p="{ids[i]}"' for i in shown.tolist()]
        notes = [(d or "") + p for d, p in zip(notes or [""] * len(xs), phase_attr)]
        used_phases = [n for n in LEAF_PHASES if n in {phase_names[k] for k in heaviest[shown].tolist()}]
        css += _phase_css(used_phases)
    rects = [
        f'<rect x="{x}" width="{w}" height="{FRAME_H - 1}" class="{c}" n="{n}" s="{s}"{d}/>'
        for x, w, c, n, s, d in zip(xs, ws, node_class, names, counts, notes or [""] * len(xs))
    ]
    # a level's frames share one group that places them: their rects carry no y (a twelfth of the file)
    level_rows = [
        f'<g transform="translate(0,{level_y})">\n' + "\n".join(rects[i] for i in members) + "\n</g>"
        for level_y, members in groupby(sorted(range(len(rects)), key=ys.__getitem__), key=ys.__getitem__)
    ]
    labels = _labels(xs, ws, ys, label_list)
    legend = _legend(entries, TOP + frames_h + 22, "legend", hidden=by_phase)
    if phase_names:
        phase_entries = [(f"q{PHASE_IDS[n]}", n) for n in used_phases]
        legend += _legend(phase_entries, TOP + frames_h + 22, "plegend", hidden=not by_phase)

    config = (
        f"var UNITS={UNITS},TOTAL={total!r},COUNT={int(counted)},ICICLE={int(icicle)},FX={XPAD},"
        f"FY={TOP},FW={inner},FH={frames_h},DH={FRAME_H},CW={CHAR_W},WIDTH={WIDTH},HEIGHT={height};"
    )
    parts = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}">\n',
        "<style>",
        css,
        "</style>\n",
        f'<rect width="{WIDTH}" height="{height}" fill="#f7f7f4"/>\n',
        f'<text id="title" x="{WIDTH // 2}" y="24" text-anchor="middle">{escape(title)}</text>\n',
        f'<text id="sub" x="{WIDTH // 2}" y="42" text-anchor="middle">{escape(subtitle)}</text>\n',
        f'<text id="reset" class="btn" x="{XPAD}" y="24" style="display:none">Reset zoom</text>\n',
        f'<text id="search" class="btn" x="{WIDTH - XPAD}" y="24" text-anchor="end">Search (Ctrl-F)</text>\n',
        f'<svg id="f"{BYPHASE if by_phase and phase_names else ""} x="{XPAD}" y="{TOP}" '
        f'width="{inner}" height="{frames_h}" '
        f'viewBox="0 0 {UNITS} {frames_h}" preserveAspectRatio="none">\n',
        "\n".join(level_rows),
        "\n</svg>\n",
        '<g id="l">',
        "".join(labels),
        "</g>\n",
        legend,
        f'<text id="matched" x="{WIDTH - XPAD}" y="{TOP + frames_h + 22}" text-anchor="end"> </text>\n',
        '<g id="tip" visibility="hidden"><rect rx="3" ry="3"/><text><tspan id="t1" x="0" dy="0"/>'
        '<tspan id="t2" x="0" dy="15"/><tspan id="t3" x="0" dy="15"/></text></g>\n',
        "<script><![CDATA[\n",
        config,
        asset("flamegraph.js"),
        "]]></script>\n",
        "</svg>\n",
    ]
    return "".join(parts)


def _subtitle(tree: CallTree, mode: str, view: str) -> str:
    total = float(tree.total[0])
    if tree.unit == "count":
        what = f"{_number(total)} samples"
    else:
        time = "waiting for the GIL" if mode == "gil" else f"of {mode} time"
        what = f"{_seconds(total)} {time}, {_number(float(tree.samples[0]))} samples"
    return what if view == "code" else f"{what}, {view} view"


def _seconds(value: float) -> str:
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.6g}"


def _classes(tree: CallTree, frame_ids: set[int]) -> tuple[dict[int, str], list[str]]:
    """CSS class of each drawn frame (kind letter + shade) and the kinds drawn, in legend order."""
    classes, present = {}, set()
    for f in frame_ids:
        kind = category(tree.frames[f])
        kind = kind if kind in _KINDS else "marker"
        present.add(kind)
        classes[f] = f"{_KINDS[kind][0]}{zlib.crc32(tree.labels[f].encode('utf-8', 'replace')) % SHADES}"
    return classes, [k for k in CATEGORIES if k in present]


def _css(used: list[str]) -> str:
    rules = [asset("flamegraph.css")]
    for kind in used:
        letter, hue, sat, light = _KINDS[kind]
        for shade in range(SHADES):
            r, g, b = colorsys.hls_to_rgb(hue / 360, light + (shade - 1.5) * 0.035, sat)
            rules.append(
                f".{letter}{shade}{{fill:#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}}}"
            )
    return "".join(rules)


def _phase_css(names: list[str]) -> str:
    """Phase colours: on the legend's swatches, and on frames while ``#f`` has the class ``byphase``
    (past a search's highlight, which stays)."""
    return "".join(
        f'.q{PHASE_IDS[n]},#f.byphase rect[p="{PHASE_IDS[n]}"]:not(.hl){{fill:{PHASE_COLORS[n]}}}'
        for n in names
    )


def _legend(entries: list[tuple[str, str]], y: int, ident: str = "legend", hidden: bool = False) -> str:
    """Legend swatches: (CSS class, text) pairs in a row."""
    out, x = [f'<g id="{ident}"{HIDDEN if hidden else ""}>'], XPAD
    for cls, name in entries:
        out.append(
            f'<rect x="{x}" y="{y - 10}" width="10" height="10" class="{cls}"/>'
            f'<text x="{x + 14}" y="{y}">{escape(name)}</text>'
        )
        x += 14 + CHAR_W * len(name) + 16
    out.append("</g>\n")
    return "".join(out)


def _labels(xs: list[int], ws: list[int], ys: list[int], names: list[str]) -> list[str]:
    """Frame names drawn where they fit (the script redraws them after a zoom with the same rule)."""
    out = []
    per_unit = (WIDTH - 2 * XPAD) / UNITS
    min_units = (3 * CHAR_W + 6) / per_unit
    for x, w, y, name in zip(xs, ws, ys, names):
        if w < min_units:
            continue
        fit = int((w * per_unit - 6) // CHAR_W)
        text = name if len(name) <= fit else name[: fit - 2] + ".."
        out.append(f'<text x="{XPAD + x * per_unit + 3:.1f}" y="{TOP + y + 11.5}">{escape(text)}</text>')
    return out
