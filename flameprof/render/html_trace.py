"""The HTML report's traced-window section: top ops, layer costs, the device's idle time and the
allocator's memory over time, from the report's ``ops``, ``memory`` and ``device`` data."""

from __future__ import annotations

from html import escape

import numpy as np

from ..analyze.report import Report
from ..model.counters import TORCH_ALLOCATED_BYTES
from ..model.profile import Profile
from .memory_svg import memory_svg
from .ops_report import device_sentences, kernel_cells, peak_place

TOP = 15


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _table(table_id: str, head: list[str], rows: list[list[str]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table id="{table_id}"><tr>{header}</tr>{cells}</table>'


def memory_chart(profile: Profile, width: int = 1000, height: int = 140) -> str:
    """The allocator's bytes over the traced window, as a line (empty without memory events)."""
    series = profile.counters.get(TORCH_ALLOCATED_BYTES)
    if series is None or len(series[0]) < 2:
        return ""
    times, values = np.asarray(series[0]), np.asarray(series[1])
    span = float(times[-1] - times[0]) or 1.0
    top = float(values.max()) or 1.0
    x = (times - times[0]) / span * (width - 60) + 56
    y = height - 4 - values / top * (height - 16)
    points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(x.tolist(), y.tolist()))
    return (
        f'<svg class="chart" id="fp-memory-chart" width="{width}" height="{height}" role="img" '
        f'aria-label="memory allocated over the traced window">'
        f'<text x="52" y="12" text-anchor="end">{top / 1e6:.1f} MB</text>'
        f'<text x="52" y="{height - 4}" text-anchor="end">0</text>'
        f'<polyline fill="none" stroke="#3b6fb6" stroke-width="1.5" points="{points}"/></svg>'
    )


def traced_window_html(r: Report, profile: Profile) -> str:
    """The section, or an empty string when the profile has no traced window."""
    ops, memory, device = r.ops, r.memory, r.device
    if not ops:
        return ""
    parts = [
        '<h2 id="fp-traced-window">Traced window</h2>',
        f'<p class="meta">{ops.steps} step(s), {_ms(ops.window_seconds)}, op time {_ms(ops.op_seconds)}.</p>',
        _table(
            "fp-ops",
            ["op", "self", "total", "calls", "input shapes"],
            [
                [_e(o.name), _ms(o.self), _ms(o.total), str(o.calls), _e(", ".join(o.shapes[:1]))]
                for o in ops.top[:TOP]
            ],
        ),
        _table(
            "fp-op-layers",
            ["layer", "forward", "backward", "device", "GFLOP", "GFLOP/s", "parameters"],
            [
                [
                    _e(c.name),
                    _ms(c.forward),
                    _ms(c.backward),
                    _ms(c.device),
                    f"{c.flops / 1e9:.4f}",
                    f"{c.gflops_per_s:.2f}",
                    f"{c.params:,}",
                ]
                for c in ops.layers[:TOP]
            ],
        ),
    ]
    if memory:
        parts.append(
            f'<p class="meta" id="fp-memory">Memory ({_e(memory.device)}): peak '
            f"{memory.peak / 1e6:.2f} MB at {_e(peak_place(r))}.</p>"
        )
        parts.append(memory_chart(profile))
        parts.append(memory_svg(r.memory_flow, standalone=False))
    if device:
        items = "".join(f"<li>{_e(line)}</li>" for line in device_sentences(device))
        parts.append(
            f'<div class="meta" id="fp-device"><p>Device busy {device.busy_percent:.1f}% of the traced '
            f"steps.</p><ul>{items}</ul></div>"
        )
        parts.append(
            _table(
                "fp-kernels",
                ["kernel", "type", "total", "count", "mean", "min", "max", "stddev"],
                [[_e(k.name[:100]), k.type, *kernel_cells(k)] for k in device.kernels[:TOP]],
            )
        )
    return "\n".join(parts) + "\n"
