"""Writes the standard outputs of a profiling run into a directory, each file atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .atomic import write_text
from .errors import FlameprofError

if TYPE_CHECKING:
    from .model.profile import Profile


@dataclass
class OutputOptions:
    """Options shared by ``run``, ``attach``, ``render`` and the Python API."""

    mode: str = "wall"          # weight shown: wall or cpu
    count: str = "samples"      # folded counts: samples or ms
    view: str = "code"
    title: str | None = None
    minwidth: float = 0.1       # pixels, as flamegraph.pl's --minwidth
    icicle: bool = False
    formats: tuple[str, ...] = ()  # extra exports (render/exports.py): speedscope, chrome, pprof, html


def prepare_output_dir(path: str) -> str:
    """Create ``path`` if needed and make sure it is writable, before any work is done."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise FlameprofError(f"cannot create output directory {path}: {exc.strerror or exc}") from None
    if not os.path.isdir(path):
        raise FlameprofError(f"output path {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise FlameprofError(f"output directory {path} is not writable")
    return path


def write_outputs(profile: "Profile", outdir: str, options: OutputOptions) -> list[str]:
    """Write profile.flameprof, profile.folded and profile.svg; returns their paths."""
    from .model import storage
    from .render.folded import folded_lines
    from .render.svg import render_svg

    prepare_output_dir(outdir)
    paths = []
    path = os.path.join(outdir, "profile.flameprof")
    storage.save(profile, path)
    paths.append(path)
    path = os.path.join(outdir, "profile.folded")
    lines = folded_lines(profile, options.mode, options.count, options.view)
    write_text(path, "".join(line + "\n" for line in lines))
    paths.append(path)
    path = os.path.join(outdir, "profile.svg")
    write_text(path, render_svg(profile, mode=options.mode, view=options.view, title=options.title,
                                minwidth=options.minwidth, icicle=options.icicle))
    paths.append(path)
    if options.formats:
        from .render.exports import write_exports

        paths += write_exports(profile, os.path.join(outdir, "profile"), options)
    return paths
