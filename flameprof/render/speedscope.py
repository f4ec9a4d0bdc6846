"""speedscope JSON: one time-ordered sampled profile per thread, weighted by time.

Follows speedscope's published file format (``file-format-spec.ts``): shared frames, and per
profile a list of stacks (indices into the frames, root first) with a weight each. Consecutive
samples of a thread with the same stack are merged, which keeps the time order and the file small.
"""

from __future__ import annotations

import json

import numpy as np

from ..analyze.threads import thread_label
from ..model.frames import Labeler
from ..model.profile import Profile

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def weight_unit(profile: Profile, mode: str) -> str:
    """The speedscope unit of ``profile.weights(mode)``: seconds, or none for imported counts."""
    if mode == "samples" or profile.meta.get("weight_unit", "seconds") != "seconds":
        return "none"
    return "seconds"


def thread_runs(profile: Profile, thread: int, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stacks and summed weights of ``thread``'s samples in time order, consecutive equal stacks merged."""
    idx = np.nonzero(profile.sample_thread == thread)[0]
    idx = idx[np.argsort(profile.sample_time[idx], kind="stable")]
    stacks = profile.sample_stack[idx]
    if not len(stacks):
        return stacks, weights[idx]
    starts = np.concatenate(([0], np.nonzero(stacks[1:] != stacks[:-1])[0] + 1))
    return stacks[starts], np.add.reduceat(weights[idx], starts)


def render_speedscope(profile: Profile, mode: str = "wall", name: str | None = None) -> str:
    """The speedscope file for ``profile`` (weights from ``mode``: wall, cpu or samples)."""
    labeler = Labeler(profile.meta)
    shared = []
    for frame in profile.frames:
        entry: dict = {"name": labeler.label(frame)}
        if frame.file:
            entry["file"] = frame.file
        if frame.line:
            entry["line"] = frame.line
        shared.append(entry)
    weights = profile.weights(mode)
    unit = weight_unit(profile, mode)
    # The JSON text of each sampled stack, once, from a walk up its parents: the texts of all the
    # prefixes of a deep stack would be quadratic in its depth.
    parents, frames = profile.stack_parent.tolist(), profile.stack_frame.tolist()
    stack_text: dict[int, str] = {-1: "[]"}

    def text(stack: int) -> str:
        out = stack_text.get(stack)
        if out is None:
            ids = []
            s = stack
            while s >= 0:
                ids.append(frames[s])
                s = parents[s]
            out = stack_text[stack] = "[" + ",".join(map(str, reversed(ids))) + "]"
        return out

    parts = []
    order = sorted(
        range(len(profile.threads)), key=lambda t: (profile.threads[t].pid, profile.threads[t].tid)
    )
    for thread in order:
        stacks, sums = thread_runs(profile, thread, weights)
        keep = sums > 0
        stacks, sums = stacks[keep], sums[keep]
        if not len(stacks):
            continue
        samples = ",".join(map(text, stacks.tolist()))
        head = json.dumps(
            {
                "type": "sampled",
                "name": thread_label(profile, thread),
                "unit": unit,
                "startValue": 0,
                "endValue": float(sums.sum()),
            }
        )
        parts.append(f'{head[:-1]},"samples":[{samples}],"weights":{json.dumps(sums.tolist())}}}')
    title = (
        name or profile.meta.get("title") or " ".join(profile.meta.get("argv") or []) or "flameprof profile"
    )
    head = json.dumps(
        {
            "$schema": SCHEMA,
            "exporter": "flameprof",
            "name": title,
            "activeProfileIndex": 0,
            "shared": {"frames": shared},
        }
    )
    return f'{head[:-1]},"profiles":[{",".join(parts)}]}}'
