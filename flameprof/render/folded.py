"""Collapsed stacks (the flamegraph.pl / inferno / speedscope "folded" text format).

One line per distinct stack: frames root first joined by ``;``, a space, and a count.
"""

from __future__ import annotations

from typing import IO

from ..analyze.views import display_stacks
from ..model.frames import Labeler
from ..model.profile import Profile


def folded_lines(
    profile: Profile, mode: str = "wall", count: str = "samples", view: str = "code"
) -> list[str]:
    """Lines of the folded file, sorted. ``count`` is ``samples`` (sample counts) or ``ms`` (milliseconds of
    ``mode`` weight); counts are integers so every consumer accepts them."""
    labeler = Labeler(profile.meta)
    if count == "samples":  # an imported folded profile's weights are already sample counts
        weight_mode = "wall" if profile.meta.get("weight_unit", "seconds") == "count" else "samples"
    elif count == "ms":
        weight_mode = mode
    else:
        raise ValueError(f"unknown count {count!r} (expected samples or ms)")
    scale = 1000.0 if count == "ms" and profile.meta.get("weight_unit", "seconds") == "seconds" else 1.0
    out: dict[str, float] = {}
    for frames, weight in display_stacks(profile, weight_mode, view):
        if not frames:
            continue
        key = ";".join(labeler.label(f) for f in frames)
        out[key] = out.get(key, 0.0) + weight * scale
    lines = []
    for key in sorted(out):
        value = int(round(out[key]))
        if value > 0:
            lines.append(f"{key} {value}")
    return lines


def write_folded(
    profile: Profile, fh: IO[str], mode: str = "wall", count: str = "samples", view: str = "code"
) -> None:
    for line in folded_lines(profile, mode, count, view):
        fh.write(line)
        fh.write("\n")
