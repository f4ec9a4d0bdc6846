"""The HTML report: one self-contained file (no external resource, opens offline) with the summary, the
phase breakdown and verdict, top layers and functions, a per-step chart and the interactive flame graph.

The numbers come from ``report.report_data`` (the same as ``flameprof report``); the flame graph is
svg.py's, inlined, with its own script.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from .. import __version__
from ..model.phase_names import LEAF_PHASES
from .asset_files import asset
from .html_trace import traced_window_html
from .report import apart_line, phase_lines, report_data, steps_line
from .svg import PHASE_COLORS, render_svg

if TYPE_CHECKING:
    from ..analyze.breakdown import Analysis
    from ..model.profile import Profile
    from .options import OutputOptions

MAX_STEPS = 300  # bars in the per-step chart
TOP = 10


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _phase_bar(phases: dict) -> str:
    """One horizontal bar of the leaf phases' shares."""
    parts, x = [], 0.0
    for name in LEAF_PHASES:
        top, _, sub = name.partition(".")
        cell = phases[top][sub] if sub else phases[name]
        width = cell["percent"] * 10
        if width > 0:
            parts.append(
                f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="22" fill="{PHASE_COLORS[name]}">'
                f"<title>{_e(name)}: {cell['percent']:.1f}% ({cell['seconds']:.3f} s)</title></rect>"
            )
            x += width
    bars = "".join(parts)
    return f'<svg class="chart" width="1000" height="22" role="img" aria-label="phase shares">{bars}</svg>'


def _phase_table(data: dict) -> str:
    steady = data["steps"]["steady"]["phases"] if data["steps"]["count"] else None
    rows = []
    for name, secs, pct, st in phase_lines(data["phases"], steady, data["unit"]):
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


def _step_chart(steps: dict) -> str:
    """Stacked bars of each step's time per phase; warm-up steps drawn faded."""
    per_step = steps["per_step"][:MAX_STEPS]
    if not per_step:
        return '<p class="note">No steps were found (mark them with <code>flameprof.step()</code>).</p>'
    height, left, bottom = 180, 48, 18
    longest = max(s["wall"] for s in per_step) or 1.0
    bar = (1000 - left) / len(per_step)
    parts = [
        f'<text x="{left - 6}" y="12" text-anchor="end">{longest * 1e3:.0f} ms</text>',
        f'<text x="{left - 6}" y="{height}" text-anchor="end">0</text>',
        f'<line x1="{left}" y1="{height}" x2="1000" y2="{height}" stroke="#999"/>',
    ]
    for i, step in enumerate(per_step):
        x, y = left + i * bar, float(height)
        opacity = ' opacity="0.45"' if step["warmup"] else ""
        for name in LEAF_PHASES:
            h = step["phases"][name] / longest * (height - 4)
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(bar - 1, 0.5):.2f}" height="{h:.2f}" '
                f'fill="{PHASE_COLORS[name]}"{opacity}><title>step '
                f"{i}{' (warm-up)' if step['warmup'] else ''}: "
                f"{_e(name)} {step['phases'][name] * 1e3:.1f} ms of {step['wall'] * 1e3:.1f} "
                "ms</title></rect>"
            )
    legend = "".join(
        f'<span class="swatch" style="background:{c}"></span>{_e(n)} &nbsp; ' for n, c in PHASE_COLORS.items()
    )
    more = (
        f'<p class="note">First {MAX_STEPS} of {len(steps["per_step"])} steps shown.</p>'
        if len(steps["per_step"]) > MAX_STEPS
        else ""
    )
    return (
        f'<svg class="chart" id="fp-step-chart" width="1000" height="{height + bottom}" role="img" '
        f'aria-label="time per step">{"".join(parts)}</svg><p class="note">{legend}'
        f"(faded: warm-up)</p>{more}"
    )


def mode_text(mode: str) -> str:
    return {"wall": "wall time", "cpu": "CPU time", "samples": "sample counts"}.get(mode, mode)


def _rows_table(table_id: str, rows: list[dict], title: str) -> str:
    if not rows:
        return f'<p class="note">No {title}.</p>'
    body = "".join(
        f'<tr><td class="name">{_e(r["name"])}</td><td>{r["self"]:.3f} '
        f"s</td><td>{r['self_percent']:.1f}%</td>"
        f"<td>{r['total']:.3f} s</td><td>{r['total_percent']:.1f}%</td></tr>"
        for r in rows[:TOP]
    )
    return (
        f'<table id="{table_id}"><tr><th class="name">{_e(title)}</th><th>self</th><th>self %</th>'
        f"<th>total</th><th>total %</th></tr>{body}</table>"
    )


def render_html(
    profile: Profile,
    analysis: Analysis,
    options: OutputOptions,
    source: str = "",
    flame: Profile | None = None,
) -> str:
    """The report page for ``profile`` (``analysis`` from ``breakdown.analyze`` of the same profile;
    the flame graph drawn from ``flame``, the stacks as shown, when given)."""
    data = report_data(profile, mode=options.mode, source=source, analysis=analysis)
    verdict = data["verdict"]
    svg = render_svg(
        flame if flame is not None else profile,
        mode=options.mode,
        view=options.view,
        title=options.title,
        minwidth=options.minwidth,
        icicle=options.icicle,
        color=options.color,
        rules=analysis.rules,
        phases=True,
    )
    svg = svg[svg.index("<svg") :]  # inline: no XML declaration
    title = options.title or source or " ".join(profile.meta.get("argv") or []) or "profile"
    advice = "".join(f"<li>{_e(a)}</li>" for a in verdict["advice"])
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            "<title>flameprof report: "
            f"{_e(title)}</title><style>{asset('report.css')}</style></head><body>\n",
            f"<h1>flameprof report: {_e(title)}</h1>",
            f'<p class="meta" id="fp-summary">{data["duration"]:.2f} s, {data["samples"]} samples, '
            f"{data['threads']} thread(s), loop thread {_e(data['loop_thread'] or '-')}, "
            f"{mode_text(options.mode)}</p>",
            f'<p class="meta" id="fp-steps-line">Steps: {_e(steps_line(data["steps"]))}</p>\n',
            (
                f'<p class="meta" id="fp-apart-line">Apart: {_e(apart_line(data))}</p>\n'
                if apart_line(data)
                else ""
            ),
            f'<section class="verdict {_e(verdict["level"])}" id="fp-verdict"><p>{_e(verdict["text"])}</p>'
            f"{'<ul>' + advice + '</ul>' if advice else ''}</section>\n",
            "<h2>Breakdown by phase (loop thread)</h2>",
            _phase_bar(data["phases"]),
            _phase_table(data),
            "\n",
            "<h2>Time per step</h2>",
            _step_chart(data["steps"]),
            "\n",
            "<h2>Top layers</h2>",
            _rows_table("fp-layers", data["layers"], "layer"),
            "\n",
            "<h2>Top functions</h2>",
            _rows_table("fp-functions", data["functions"], "function"),
            "\n",
            traced_window_html(data, profile),
            '<h2>Flame graph</h2><p class="note">Click a frame to zoom, Ctrl-F to search, Escape to '
            'reset. <label><input type="checkbox" id="fp-color-phase"'
            f"{' checked' if options.color == 'phase' else ''}> colour frames by phase</label></p>\n",
            f'<div id="fp-flamegraph">{svg}</div>\n',
            f"<script>{asset('phase_toggle.js')}</script>\n",
            f'<p class="note">Generated by flameprof {__version__}.</p></body></html>\n',
        ]
    )
