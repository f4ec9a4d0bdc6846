"""The HTML report: one self-contained file (no external resource, opens offline) with the summary, the
phase breakdown and verdict, top layers and functions, each thread's part of the GIL, a per-step chart
and the interactive flame graph.

The numbers are the rendering's ``Report`` (the same as ``flameprof report``); the flame graph is
svg.py's drawing of the rendering's call tree (the one the ``.svg`` file draws), inlined, with its
own script.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import __version__
from ..model.phase_names import LEAF_PHASES
from .asset_files import asset
from .html_trace import traced_window_html
from .report import (
    GIL_COLUMNS,
    GIL_UNKNOWN_TEXT,
    apart_line,
    device_time_line,
    gil_heading,
    gil_rows,
    phase_lines,
    steps_line,
)
from .svg import PHASE_COLORS, flame_svg

if TYPE_CHECKING:
    from ..analyze.report import FunctionRow, Report, Share, Steps
    from ..analyze.tree import CallTree
    from ..model.profile import Profile
    from .options import OutputOptions

MAX_STEPS = 300  # bars in the per-step chart
TOP = 10


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _phase_bar(phases: dict[str, Share]) -> str:
    """One horizontal bar of the leaf phases' shares."""
    parts, x = [], 0.0
    for name in LEAF_PHASES:
        top, _, sub = name.partition(".")
        cell = getattr(phases[top], sub) if sub else phases[name]
        width = cell.percent * 10
        if width > 0:
            parts.append(
                f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="22" fill="{PHASE_COLORS[name]}">'
                f"<title>{_e(name)}: {cell.percent:.1f}% ({cell.seconds:.3f} s)</title></rect>"
            )
            x += width
    bars = "".join(parts)
    return f'<svg class="chart" width="1000" height="22" role="img" aria-label="phase shares">{bars}</svg>'


def _phase_table(r: Report) -> str:
    steady = r.steps.steady.phases if r.steps.count else None
    rows = []
    for name, secs, pct, st in phase_lines(r.phases, steady, r.unit):
        leaf = name.strip()
        swatch = (
            f'<span class="swatch" style="background:{PHASE_COLORS[leaf]}"></span>'
            if leaf in PHASE_COLORS
            else ""
        )
        rows.append(
            f'<tr><td class="name">{swatch}{_e(name)}</td><td>{secs}</td><td>{pct}</td><td>{st}</td></tr>'
        )
    return (
        '<table id="fp-phases"><tr><th class="name">phase</th><th>time</th><th>% of run</th>'
        "<th>% of steady steps</th></tr>" + "".join(rows) + "</table>"
    )


def _step_chart(steps: Steps) -> str:
    """Stacked bars of each step's time per phase; warm-up steps drawn faded."""
    per_step = steps.per_step[:MAX_STEPS]
    if not per_step:
        return '<p class="note">No steps were found (mark them with <code>flameprof.step()</code>).</p>'
    height, left, bottom = 180, 48, 18
    longest = max(s.wall for s in per_step) or 1.0
    bar = (1000 - left) / len(per_step)
    parts = [
        f'<text x="{left - 6}" y="12" text-anchor="end">{longest * 1e3:.0f} ms</text>',
        f'<text x="{left - 6}" y="{height}" text-anchor="end">0</text>',
        f'<line x1="{left}" y1="{height}" x2="1000" y2="{height}" stroke="#999"/>',
    ]
    for i, step in enumerate(per_step):
        x, y = left + i * bar, float(height)
        opacity = ' opacity="0.45"' if step.warmup else ""
        for name in LEAF_PHASES:
            h = step.phases[name] / longest * (height - 4)
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(bar - 1, 0.5):.2f}" height="{h:.2f}" '
                f'fill="{PHASE_COLORS[name]}"{opacity}><title>step '
                f"{i}{' (warm-up)' if step.warmup else ''}: "
                f"{_e(name)} {step.phases[name] * 1e3:.1f} ms of {step.wall * 1e3:.1f} "
                "ms</title></rect>"
            )
    legend = "".join(
        f'<span class="swatch" style="background:{c}"></span>{_e(n)} &nbsp; ' for n, c in PHASE_COLORS.items()
    )
    more = (
        f'<p class="note">First {MAX_STEPS} of {len(steps.per_step)} steps shown.</p>'
        if len(steps.per_step) > MAX_STEPS
        else ""
    )
    return (
        f'<svg class="chart" id="fp-step-chart" width="1000" height="{height + bottom}" role="img" '
        f'aria-label="time per step">{"".join(parts)}</svg><p class="note">{legend}'
        f"(faded: warm-up)</p>{more}"
    )


def mode_text(mode: str) -> str:
    return {
        "wall": "wall time",
        "cpu": "CPU time",
        "samples": "sample counts",
        "gil": "time waiting for the GIL",
    }.get(mode, mode)


def _gil_table(r: Report) -> str:
    """Each thread's time holding the GIL, waiting for it, running without it and the rest."""
    if r.gil is None:
        return f'<p class="note" id="fp-gil">GIL {_e(GIL_UNKNOWN_TEXT)}.</p>'
    head = f'<th class="name">{GIL_COLUMNS[0]}</th>' + "".join(f"<th>{c}</th>" for c in GIL_COLUMNS[1:])
    body = "".join(
        f'<tr><td class="name">{_e(row[0])}</td>' + "".join(f"<td>{c}</td>" for c in row[1:]) + "</tr>"
        for row in gil_rows(r, TOP)
    )
    return f'<p class="note">{_e(gil_heading(r))}.</p><table id="fp-gil"><tr>{head}</tr>{body}</table>'


def _rows_table(table_id: str, rows: Sequence[FunctionRow], title: str) -> str:
    if not rows:
        return f'<p class="note">No {title}.</p>'
    body = "".join(
        f'<tr><td class="name">{_e(r.name)}</td><td>{r.self:.3f} s</td><td>{r.self_percent:.1f}%</td>'
        f"<td>{r.total:.3f} s</td><td>{r.total_percent:.1f}%</td></tr>"
        for r in rows[:TOP]
    )
    return (
        f'<table id="{table_id}"><tr><th class="name">{_e(title)}</th><th>self</th><th>self %</th>'
        f"<th>total</th><th>total %</th></tr>{body}</table>"
    )


def render_html(r: Report, profile: Profile, options: OutputOptions, tree: CallTree) -> str:
    """The report page of ``profile``: its report, and its flame graph drawn from ``tree``, a call tree
    with phase columns (``Rendering.flame_tree``, the one the ``.svg`` file draws)."""
    svg = flame_svg(
        tree,
        options.mode,
        options.view,
        options.title,
        options.minwidth,
        options.icicle,
        options.color,
        phases=True,
    )
    svg = svg[svg.index("<svg") :]  # inline: no XML declaration
    title = options.title or r.source or " ".join(profile.meta.get("argv") or []) or "profile"
    advice = "".join(f"<li>{_e(a)}</li>" for a in r.verdict.advice)
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            "<title>flameprof report: "
            f"{_e(title)}</title><style>{asset('report.css')}</style></head><body>\n",
            f"<h1>flameprof report: {_e(title)}</h1>",
            f'<p class="meta" id="fp-summary">{r.duration:.2f} s, {r.samples} samples, '
            f"{r.threads} thread(s), loop thread {_e(r.loop_thread or '-')}, "
            f"{mode_text(options.mode)}</p>",
            f'<p class="meta" id="fp-steps-line">Steps: {_e(steps_line(r.steps))}</p>\n',
            (f'<p class="meta" id="fp-apart-line">Apart: {_e(apart_line(r))}</p>\n' if apart_line(r) else ""),
            (
                f'<p class="meta" id="fp-device-time">Device: {_e(device_time_line(r.device_time))}</p>\n'
                if r.device_time
                else ""
            ),
            f'<section class="verdict {_e(r.verdict.level)}" id="fp-verdict"><p>{_e(r.verdict.text)}</p>'
            f"{'<ul>' + advice + '</ul>' if advice else ''}</section>\n",
            (
                '<h2>Graph advice</h2><ul id="fp-graph-advice">'
                + "".join(f"<li>{_e(a.text)}</li>" for a in r.graph_advice)
                + "</ul>\n"
                if r.graph_advice
                else ""
            ),
            "<h2>Breakdown by phase (loop thread)</h2>",
            _phase_bar(r.phases),
            _phase_table(r),
            "\n",
            "<h2>Time per step</h2>",
            _step_chart(r.steps),
            "\n",
            "<h2>Top layers</h2>",
            _rows_table("fp-layers", r.layers, "layer"),
            "\n",
            "<h2>Top functions</h2>",
            _rows_table("fp-functions", r.functions, "function"),
            "\n",
            "<h2>GIL</h2>",
            _gil_table(r),
            "\n",
            traced_window_html(r, profile),
            '<h2>Flame graph</h2><p class="note">Click a frame to zoom, Ctrl-F to search, Escape to '
            'reset. <label><input type="checkbox" id="fp-color-phase"'
            f"{' checked' if options.color == 'phase' else ''}> colour frames by phase</label></p>\n",
            f'<div id="fp-flamegraph">{svg}</div>\n',
            f"<script>{asset('phase_toggle.js')}</script>\n",
            f'<p class="note">Generated by flameprof {__version__}.</p></body></html>\n',
        ]
    )
