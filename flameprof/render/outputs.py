"""Writes the outputs of a profiling run into a directory: the standard files and the requested
exports, each atomically, all from one ``Rendering``."""

from __future__ import annotations

import os

from ..errors import FlameprofError
from .formats import STANDARD, Rendering, write_formats

BASE_NAME = "profile"


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


def write_outputs(rendering: Rendering, outdir: str) -> list[str]:
    """Write profile.flameprof, profile.folded, profile.svg and the requested exports; returns their paths."""
    prepare_output_dir(outdir)
    names = STANDARD + tuple(n for n in rendering.options.formats if n not in STANDARD)
    return write_formats(rendering, os.path.join(outdir, BASE_NAME), names)
