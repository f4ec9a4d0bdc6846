"""Memory over the traced window as an SVG: the allocator's bytes in use against time, stacked by the
layer that allocated them (``analyze/memory_flow.py``), the peak marked with its layer and op.
Standalone (``--format memory``) and inlined in the HTML report."""

from __future__ import annotations

from html import escape

from ..analyze.memory_flow import MemoryFlow

WIDTH, HEIGHT = 1000, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 24
COLUMNS, COLUMN_W, LABEL = 3, 310, 48  # the legend: entries a row, their width, characters shown
LEGEND_ROW = 16
COLORS = (
    "#bdbdbd",
    "#3b6fb6",
    "#e07b39",
    "#4aa564",
    "#c94c4c",
    "#8e6bb8",
    "#8c6d46",
    "#d16ba5",
    "#7f7f7f",
    "#b5b83a",
)


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def memory_svg(flow: MemoryFlow | None, standalone: bool = True) -> str:
    """The chart (with an XML declaration when ``standalone``); a one-line note without a flow."""
    head = '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n' if standalone else ""
    if flow is None:
        return (
            f'{head}<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="40">'
            '<text x="8" y="24">No memory events: record a traced window (--trace-steps) or import a '
            "torch.profiler trace with profile_memory=True.</text></svg>\n"
        )
    names = list(flow.bands)
    height = HEIGHT + 16 + LEGEND_ROW * ((len(names) + COLUMNS - 1) // COLUMNS)
    times = flow.times
    t0, span = times[0], (times[-1] - times[0]) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = max(flow.peak, 1.0)

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    parts = []
    below = [0.0] * len(times)
    for k, name in enumerate(names):
        above = [b + max(v, 0.0) for b, v in zip(below, flow.bands[name])]
        upper = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(times, above))
        lower = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(reversed(times), reversed(below)))
        title = f"{name}: {_mb(max(flow.bands[name]))} at most"
        parts.append(
            f'<polygon points="{upper} {lower}" fill="{COLORS[k % len(COLORS)]}" fill-opacity="0.85">'
            f"<title>{escape(title)}</title></polygon>"
        )
        below = above
    where = " / ".join(w for w in (flow.peak_layer, flow.peak_op) if w) or "-"
    px, py = x(flow.peak_time), y(flow.peak)
    anchor = "end" if px > WIDTH / 2 else "start"
    parts.append(
        f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{px:.1f}" y2="{TOP + plot_h}" stroke="#000" '
        'stroke-dasharray="3,2"/>'
        f'<text x="{px + (-4 if anchor == "end" else 4):.1f}" y="{max(py - 4, TOP - 6):.1f}" '
        f'text-anchor="{anchor}" font-weight="bold">peak {_mb(flow.peak)} at {escape(where)}</text>'
    )
    cells = [
        (LEFT + (k % COLUMNS) * COLUMN_W, HEIGHT + 16 + (k // COLUMNS) * LEGEND_ROW)
        for k in range(len(names))
    ]
    legend = "".join(
        f'<rect x="{lx}" y="{ly - 10}" width="10" height="10" fill="{COLORS[k % len(COLORS)]}"/>'
        f'<text x="{lx + 14}" y="{ly}">{escape(name[:LABEL])}</text>'
        for k, (name, (lx, ly)) in enumerate(zip(names, cells))
    )
    axes = (
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{_mb(top)}</text>'
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{TOP + plot_h + 16}">0 ms</text>'
        f'<text x="{WIDTH - RIGHT}" y="{TOP + plot_h + 16}" text-anchor="end">{span * 1e3:.1f} ms</text>'
        f'<text x="{LEFT}" y="16" font-weight="bold">Memory in use on {escape(flow.device)} over the traced '
        "window, by the layer that allocated it</text>"
    )
    return (
        f'{head}<svg xmlns="http://www.w3.org/2000/svg" id="fp-memory-flow" width="{WIDTH}" '
        f'height="{height}" font-family="Verdana, sans-serif" font-size="11" role="img" '
        'aria-label="memory over time">'
        f"{axes}{''.join(parts)}{legend}</svg>\n"
    )
