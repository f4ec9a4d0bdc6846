"""``report --ops``: the traced window's op table (``analyze/op_table.py``) as text, Markdown, CSV or
JSON."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from ..analyze.op_table import OpTable, OpTableRow
from . import markdown

HEADER = (
    "self ms",
    "total ms",
    "calls",
    "GFLOP",
    "GFLOP/s",
    "MB",
    "GB/s",
    "input shapes",
    "output shapes",
    "layer",
)


def _cells(row: OpTableRow) -> tuple[str, ...]:
    return (
        f"{row.self * 1e3:.3f}",
        f"{row.total * 1e3:.3f}",
        str(row.calls),
        f"{row.flops / 1e9:.4g}",
        f"{row.flops_per_s / 1e9:.2f}",
        f"{row.bytes / 1e6:.3f}",
        f"{row.bytes_per_s / 1e9:.2f}",
        row.input_shapes,
        row.output_shapes,
        row.layer,
    )


def _title(table: OpTable) -> str:
    clock = "device" if table.device_time else "host"
    return (
        f"ops of the traced window by {table.aggregate_by}, ordered by {table.order_by}: {clock} time, "
        f"FLOPs and bytes per traced step ({table.steps} step(s))"
    )


def format_op_table(table: OpTable, fmt: str) -> str:
    """The table in ``fmt``: text, markdown, csv or json."""
    if fmt == "json":
        return json.dumps(asdict(table), indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow((table.aggregate_by, *HEADER))
        writer.writerows((row.key, *_cells(row)) for row in table.rows)
        return out.getvalue()
    if fmt == "markdown":
        lines = [f"# {markdown.text(_title(table))}", "", f"| {table.aggregate_by} | {' | '.join(HEADER)} |"]
        lines.append("| --- " + "| ---: " * 7 + "| --- | --- | --- |")
        for row in table.rows:
            cells = _cells(row)
            code = [markdown.code(c) if c else "" for c in cells[7:]]
            lines.append(f"| {markdown.code(row.key)} | {' | '.join(cells[:7])} | {' | '.join(code)} |")
        return "\n".join(lines) + "\n"
    widths = (10, 10, 7, 9, 8, 9, 7)
    head = " ".join(f"{h:>{w}}" for h, w in zip(HEADER, widths))
    lines = [_title(table), f"  {head}  {table.aggregate_by} [input shapes -> output shapes] (layer)"]
    for row in table.rows:
        c = _cells(row)
        numbers = " ".join(f"{cell:>{w}}" for cell, w in zip(c, widths))
        shapes = f" [{c[7]} -> {c[8] or '?'}]" if c[7] else ""
        layer = f" ({c[9]})" if table.aggregate_by != "layer" else ""
        lines.append(f"  {numbers}  {row.key}{shapes}{layer}")
    return "\n".join(lines) + "\n"
