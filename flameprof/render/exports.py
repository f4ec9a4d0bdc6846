"""The extra export files that ``--format`` adds next to the standard outputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analyze.breakdown import Analysis
    from ..model.profile import Profile
    from ..outputs import OutputOptions

# format name -> file name suffix (after the base name, e.g. ``profile``)
FORMATS = {"speedscope": ".speedscope.json", "chrome": ".trace.json", "pprof": ".pb.gz", "html": ".html"}


def step_spans(analysis: "Analysis") -> list[tuple[int, float, float]]:
    """(thread, start, end) of every step the analysis found, for timeline exports."""
    steps = analysis.steps
    bounds = steps.bounds.tolist()
    return [(steps.thread, a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def write_exports(profile: "Profile", base: str, options: "OutputOptions") -> list[str]:
    """Write each of ``options.formats`` to ``base + suffix``; returns the paths."""
    from ..analyze.breakdown import analyze
    from ..analyze.phases import LEAF_PHASES
    from ..atomic import atomic_file, write_bytes, write_text

    analysis = analyze(profile, mode=options.mode) if set(options.formats) & {"chrome", "pprof", "html"} else None
    paths = []
    for name in options.formats:
        path = base + FORMATS[name]
        if name == "speedscope":
            from .speedscope import render_speedscope

            write_text(path, render_speedscope(profile, options.mode, options.title))
        elif name == "chrome":
            from .chrome_trace import write_chrome_trace

            with atomic_file(path) as fh:
                write_chrome_trace(profile, fh, analysis.sample_phase, LEAF_PHASES, step_spans(analysis))
        elif name == "pprof":
            from .pprof import render_pprof

            write_bytes(path, render_pprof(profile, options.mode, analysis.sample_phase, LEAF_PHASES))
        else:
            from .html_report import render_html

            write_text(path, render_html(profile, analysis, options))
        paths.append(path)
    return paths
