"""The largest regressions and improvements of a differential profile, by function, layer and phase,
as terminal text or Markdown."""

from __future__ import annotations

from ..analyze.diff import Change, largest
from . import markdown

_TITLES = {"function": "Functions", "layer": "Layers", "phase": "Phases"}


def _value(x: float, unit: str, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if unit == "share":
        return f"{100 * x:+.2f} pp" if signed else f"{100 * x:.2f}%"
    if unit == "count":
        return f"{x:{sign}.0f}"
    return f"{x:{sign}.3f} s"


def _relative(c: Change) -> str:
    if c.base_total <= 0:
        return "new"
    return f"{100 * c.delta / c.base_total:+.0f}%"


def diff_table(items: list[Change], unit: str = "seconds", fmt: str = "text", limit: int = 10) -> str:
    """``unit`` is ``seconds``, ``count`` (imported sample counts) or ``share`` (normalized: fractions)."""
    out: list[str] = []
    what = "share of each profile" if unit == "share" else ("samples" if unit == "count" else "seconds")
    for kind, title in _TITLES.items():
        grown, shrunk = largest(items, kind, limit)
        if not grown and not shrunk:
            continue
        for heading, rows in (("regressions", grown), ("improvements", shrunk)):
            if not rows:
                continue
            if fmt == "markdown":
                out += [
                    f"### {title}: largest {heading} ({what})",
                    "",
                    "| change | relative | base | new | self change | name |",
                    "| ---: | ---: | ---: | ---: | ---: | --- |",
                ]
                for c in rows:
                    out.append(
                        f"| {_value(c.delta, unit, True)} | {_relative(c)} | {_value(c.base_total, unit)} | "
                        f"{_value(c.new_total, unit)} | {_value(c.delta_self, unit, True)} | "
                        f"{markdown.code(c.name)} |"
                    )
                out.append("")
            else:
                out.append(f"{title}: largest {heading} ({what}, total then self change)")
                for c in rows:
                    out.append(
                        f"  {_value(c.delta, unit, True):>10} {_relative(c):>6}  "
                        f"{_value(c.base_total, unit):>10} -> {_value(c.new_total, unit):<10} "
                        f"self {_value(c.delta_self, unit, True):>10}  {c.name}"
                    )
                out.append("")
    if not out:
        return "No differences.\n"
    return "\n".join(out)
