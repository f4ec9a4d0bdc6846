"""How a profile is rendered: the options ``run``, ``attach``, ``render`` and the Python API share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OutputOptions:
    """Options shared by ``run``, ``attach``, ``render`` and the Python API."""

    mode: str = "wall"  # weight shown: wall, cpu, samples (render) or gil (model/profile.py: MODES)
    count: str = "samples"  # folded counts: samples or ms
    view: str = "code"
    title: str | None = None
    minwidth: float = 0.1  # pixels, as flamegraph.pl's --minwidth
    icicle: bool = False
    color: str = "kind"  # frames coloured by kind of code or by phase (svg.COLORS)
    raw_stacks: bool = False  # flame graphs show the stacks as recorded (analyze/tidy_stacks.py)
    formats: tuple[str, ...] = ()  # more outputs (names in formats.FORMATS): speedscope, chrome, pprof, html
