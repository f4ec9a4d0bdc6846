"""Every file flameprof writes for a profile, in one registry: format name -> file suffix -> writer.

``run``, ``attach``, ``render`` and the Python API all write through it. A ``Rendering`` carries
the profile and its options, and computes the analysis (phases, steps, breakdown), the report and
the flame graphs' call tree at most once for all the writers and the summary. Each writer imports
its renderer when called: ``--format`` is parsed inside the profiled program, which must not see
numpy imported before it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..atomic import atomic_file, write_bytes, write_text
from ..errors import FlameprofError

if TYPE_CHECKING:
    from ..analyze.breakdown import Analysis
    from ..analyze.report import Report
    from ..analyze.tree import CallTree
    from ..model.profile import Profile
    from .options import OutputOptions

TOP = 10  # functions and layers the analysis ranks, for the report, the HTML page and the summary


@dataclass
class Rendering:
    """A profile, the options it is rendered with, and what every output is made from, each computed
    on first use: the analysis, the report, the stacks as flame graphs show them and their call tree."""

    profile: Profile
    options: OutputOptions
    source: str = ""  # what the report names as its input
    _analysis: Analysis | None = field(default=None, repr=False)
    _report: Report | None = field(default=None, repr=False)
    _shown: Profile | None = field(default=None, repr=False)
    _tree: CallTree | None = field(default=None, repr=False)
    _tree_phases: bool = field(default=False, repr=False)  # the tree has its phase columns

    @property
    def analysis(self) -> Analysis:
        if self._analysis is None:
            from ..analyze.breakdown import analyze

            self._analysis = analyze(self.profile, mode=self.options.mode, top=TOP, idle=False)
        return self._analysis

    @property
    def report(self) -> Report:
        if self._report is None:
            from ..analyze.report import build_report

            self._report = build_report(self.profile, self.analysis, self.source)
        return self._report

    def flame_tree(self, phases: bool = False) -> CallTree:
        """The call tree of ``shown`` that the SVG and the HTML page draw, built once: with a column per
        phase (``phase_tree``) when ``phases``, when frames are coloured by phase, or when the HTML
        page (which switches to phase colours) is among the outputs."""
        o = self.options
        phases = phases or o.color == "phase" or "html" in o.formats
        if self._tree is None or (phases and not self._tree_phases):
            from ..analyze.phase_tree import phase_tree
            from ..analyze.tree import build_tree

            if phases:
                self._tree = phase_tree(self.shown, o.mode, o.view, self.analysis.rules)
            else:
                self._tree = build_tree(self.shown, o.mode, o.view)
            self._tree_phases = phases
        return self._tree

    @property
    def shown(self) -> Profile:
        """The profile as flame graphs show it: ``analyze.tidy_stacks`` (startup before the loop's first
        step) unless ``raw_stacks``; with ``--mode gil``, only the samples that waited for the GIL.
        Counts of other tools' stacks (folded text, perf) are drawn as given, as ``flamegraph.pl``
        draws them."""
        if self._shown is None:
            from ..analyze.tidy_stacks import tidy_stacks

            if self.options.raw_stacks or self.profile.meta.get("weight_unit", "seconds") == "count":
                shown = self.profile
            else:
                steps = self.analysis.steps
                shown = tidy_stacks(self.profile, steps.start if steps.count else None)
            self._shown = shown.waiting_for_gil() if self.options.mode == "gil" else shown
        return self._shown

    @property
    def weighted(self) -> Profile:
        """The profile's samples that ``mode`` weighs: every one, or with ``--mode gil`` those that
        waited for the GIL (so that sample counts are of them alone)."""
        return self.profile.waiting_for_gil() if self.options.mode == "gil" else self.profile


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str  # after the base name, e.g. ``profile``
    write: Callable[[Rendering, str], None]
    text: Callable[[Rendering], str] | None = None  # text formats can also go to stdout
    standard: bool = False  # written by every run; the others on request (``--format``)


def step_spans(analysis: Analysis) -> list[tuple[int, float, float]]:
    """(thread, start, end) of every step the analysis found, for timeline exports."""
    steps = analysis.steps
    bounds = steps.bounds.tolist()
    return [(steps.thread, a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _text_format(name: str, suffix: str, text: Callable[[Rendering], str], standard: bool = False) -> Format:
    return Format(name, suffix, lambda r, path: write_text(path, text(r)), text, standard)


def _flameprof(r: Rendering, path: str) -> None:
    from ..model import storage

    try:
        storage.save(r.profile, path)
    except ValueError as exc:  # imported counts too large for the file format; the importer named it
        raise FlameprofError(f"{r.profile.meta.get('source', 'the profile')}: {exc}") from None


def _folded(r: Rendering) -> str:
    from .folded import folded_lines

    o = r.options
    return "".join(line + "\n" for line in folded_lines(r.weighted, o.mode, o.count, o.view))


def _svg(r: Rendering) -> str:
    from .svg import flame_svg

    o = r.options
    return flame_svg(r.flame_tree(), o.mode, o.view, o.title, o.minwidth, o.icicle, o.color)


def _speedscope(r: Rendering) -> str:
    from .speedscope import render_speedscope

    return render_speedscope(r.shown, r.options.mode, r.options.title)


def _chrome(r: Rendering, path: str) -> None:
    from ..model.phase_names import LEAF_PHASES
    from .chrome_trace import write_chrome_trace

    with atomic_file(path) as fh:  # streamed: a long run's trace need not fit in memory twice
        write_chrome_trace(r.profile, fh, r.analysis.sample_phase, LEAF_PHASES, step_spans(r.analysis))


def _pprof(r: Rendering, path: str) -> None:
    from ..model.phase_names import LEAF_PHASES
    from .pprof import render_pprof

    write_bytes(path, render_pprof(r.profile, r.options.mode, r.analysis.sample_phase, LEAF_PHASES))


def _firefox(r: Rendering) -> str:
    from ..analyze.phases import layer_of_stacks, phase_of_stacks
    from ..model.phase_names import LEAF_PHASES
    from .firefox import render_firefox

    p = r.shown
    stack_phase = phase_of_stacks(p, r.analysis.rules)  # the rules the analysis classified samples with
    return render_firefox(
        p, r.options.mode, stack_phase, layer_of_stacks(p), LEAF_PHASES, step_spans(r.analysis)
    )


def _memory(r: Rendering) -> str:
    from .memory_svg import memory_svg

    return memory_svg(r.report.memory_flow)


def _html(r: Rendering) -> str:
    from .html_report import render_html

    return render_html(r.report, r.profile, r.options, r.flame_tree(phases=True))


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("flameprof", ".flameprof", _flameprof, standard=True),
        _text_format("folded", ".folded", _folded, standard=True),
        _text_format("svg", ".svg", _svg, standard=True),
        _text_format("speedscope", ".speedscope.json", _speedscope),
        Format("chrome", ".trace.json", _chrome),
        Format("pprof", ".pb.gz", _pprof),
        _text_format("firefox", ".firefox.json", _firefox),
        _text_format("html", ".html", _html),
        _text_format("memory", ".memory.svg", _memory),
    )
}
STANDARD = tuple(name for name, f in FORMATS.items() if f.standard)


def write_formats(rendering: Rendering, base: str, names: tuple[str, ...]) -> list[str]:
    """Write each format of ``names`` to ``base + suffix``; returns the paths."""
    paths = []
    for name in names:
        fmt = FORMATS[name]
        path = base + fmt.suffix
        fmt.write(rendering, path)
        paths.append(path)
    return paths
