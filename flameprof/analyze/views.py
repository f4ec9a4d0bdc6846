"""Views: the same samples seen as different stacks (code frames, layer scopes, phases).

Renderers ask for ``display_stacks`` and never look at how a profile was collected.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Frame, Profile, iter_stacks, sampled_stacks
from .ops import op_stacks
from .phases import OTHER, phase_of_stacks

VIEWS = ("code", "layers", "phases", "ops")
_ROOT_KINDS = ("process", "thread")
_LAYER_KINDS = ("layer", "scope")


def display_stacks(
    profile: Profile, mode: str = "wall", view: str = "code"
) -> Iterator[tuple[list[Frame], float]]:
    """Aggregated (root-first frames, weight) pairs of ``profile`` as seen in ``view``.

    ``code``: the recorded frames. ``layers``: only layer and user-scope frames (under any
    process/thread roots), ending with the function running at the leaf. ``phases``: the code stack
    under its phase (``data`` then ``data.wait``/``data.fetch``; ``forward``, ...) as root frames.
    ``ops``: the traced window's ops under their layer, and their kernels (``ops.op_stacks``); nothing
    without a window.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (expected one of {', '.join(VIEWS)})")
    frames = profile.frames
    if view == "code":
        for ids, weight in iter_stacks(profile, mode):
            yield [frames[i] for i in ids], weight
        return
    merged: dict[tuple[Frame, ...], float] = {}
    if view == "ops":
        merged = op_stacks(profile.trace, mode) if profile.trace is not None else {}
    elif view == "layers":
        for ids, weight in iter_stacks(profile, mode):
            key = tuple(_layers_only([frames[i] for i in ids]))
            merged[key] = merged.get(key, 0.0) + weight
    else:
        # each stack's phase once, from its parent's (not by classifying every sampled stack's frames)
        phase_names = [phase_frames(p) for p in LEAF_PHASES]
        phase = np.append(phase_of_stacks(profile), OTHER).tolist()  # index -1: the empty stack
        for sid, ids, weight in sampled_stacks(profile, mode):
            key = tuple(_under_phase([frames[i] for i in ids], phase_names[phase[sid]]))
            merged[key] = merged.get(key, 0.0) + weight
    for key, weight in merged.items():
        yield list(key), weight


def _layers_only(stack: list[Frame]) -> list[Frame]:
    out = [f for f in stack if f.kind in _ROOT_KINDS or f.kind in _LAYER_KINDS]
    if stack and stack[-1].kind not in _ROOT_KINDS and stack[-1].kind not in _LAYER_KINDS:
        out.append(stack[-1])
    return out


def phase_frames(phase: str) -> list[Frame]:
    """The root frames the phases view puts above a stack of leaf phase ``phase``."""
    parent, dot, _ = phase.partition(".")
    names = [parent, phase] if dot else [phase]
    return [Frame(name, kind="marker") for name in names]


def _under_phase(stack: list[Frame], phase: list[Frame]) -> list[Frame]:
    """``stack`` below the frames of its ``phase``; process/thread roots stay above them."""
    roots = next((i for i, f in enumerate(stack) if f.kind not in _ROOT_KINDS), len(stack))
    return stack[:roots] + phase + stack[roots:]
