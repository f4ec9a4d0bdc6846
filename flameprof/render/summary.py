"""The one-screen summary printed on stderr at the end of a run."""

from __future__ import annotations

import numpy as np

from ..frames import Labeler
from ..model import Profile


def top_functions(profile: Profile, mode: str = "wall", limit: int = 10) -> list[tuple[str, float, float]]:
    """(label, self seconds, total seconds) of the functions with the most self time."""
    if not profile.num_samples:
        return []
    weights = profile.weights(mode)
    labeler = Labeler(profile.meta)
    stacks = profile.all_stack_frames()
    self_w: dict[str, float] = {}
    total_w: dict[str, float] = {}
    sums = np.bincount(profile.sample_stack + 1, weights=weights, minlength=len(stacks) + 1)
    for sid in np.nonzero(sums)[0].tolist():
        if sid == 0:
            continue
        w = float(sums[sid])
        labels = [labeler.label(profile.frames[f]) for f in stacks[sid - 1]]
        self_w[labels[-1]] = self_w.get(labels[-1], 0.0) + w
        for label in set(labels):
            total_w[label] = total_w.get(label, 0.0) + w
    ranked = sorted(self_w.items(), key=lambda kv: -kv[1])[:limit]
    return [(label, w, total_w[label]) for label, w in ranked]


def format_summary(profile: Profile, paths: list[str], mode: str = "wall") -> str:
    duration = profile.duration
    total = float(profile.weights(mode).sum()) or 1.0
    rate = profile.meta.get("rate")
    ticks = profile.meta.get("ticks")
    lines = ["", "flameprof: profile summary",
             f"  duration {duration:.2f} s, {profile.num_samples} samples, {len(profile.threads)} thread(s)"
             + (f", {rate:g} Hz requested" if rate else "")
             + (f", {ticks / duration:.0f} Hz achieved" if ticks and duration else "")]
    top = top_functions(profile, mode)
    if top:
        lines.append(f"  top functions by self {mode} time:")
        for label, self_s, total_s in top:
            lines.append(f"    {100 * self_s / total:5.1f}%  {self_s:8.3f} s  {label[:100]}")
    for path in paths:
        lines.append(f"  wrote {path}")
    return "\n".join(lines) + "\n"
