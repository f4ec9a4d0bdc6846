"""Views: the same samples seen as different stacks (code frames, layer scopes, phases).

Renderers ask for ``display_stacks`` and never look at how a profile was collected.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..model.profile import Frame, Profile, iter_stacks
from .phases import Classifier, profile_rules

VIEWS = ("code", "layers", "phases")
_ROOT_KINDS = ("process", "thread")
_LAYER_KINDS = ("layer", "scope")


def display_stacks(
    profile: Profile, mode: str = "wall", view: str = "code"
) -> Iterator[tuple[list[Frame], float]]:
    """Aggregated (root-first frames, weight) pairs of ``profile`` as seen in ``view``.

    ``code``: the recorded frames. ``layers``: only layer and user-scope frames (under any
    process/thread roots), ending with the function running at the leaf. ``phases``: the code stack
    under its phase (``data`` then ``data.wait``/``data.fetch``; ``forward``, ...) as root frames.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (expected one of {', '.join(VIEWS)})")
    frames = profile.frames
    if view == "code":
        for ids, weight in iter_stacks(profile, mode):
            yield [frames[i] for i in ids], weight
        return
    merged: dict[tuple[Frame, ...], float] = {}
    transform = _layers_only if view == "layers" else _under_phase(profile)
    for ids, weight in iter_stacks(profile, mode):
        key = tuple(transform([frames[i] for i in ids]))
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


def _under_phase(profile: Profile):
    classifier = Classifier(profile_rules(profile))

    def under_phase(stack: list[Frame]) -> list[Frame]:  # process/thread roots stay above the phase
        roots = next((i for i, f in enumerate(stack) if f.kind not in _ROOT_KINDS), len(stack))
        return stack[:roots] + phase_frames(classifier.classify(stack)) + stack[roots:]

    return under_phase
