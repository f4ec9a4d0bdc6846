"""Views: the same samples seen as different stacks (code frames, layer scopes, phases).

Renderers ask for ``display_stacks`` and never look at how a profile was collected.
"""

from __future__ import annotations

from typing import Iterator

from ..model import Frame, Profile, iter_stacks

VIEWS = ("code",)


def display_stacks(profile: Profile, mode: str = "wall", view: str = "code") -> Iterator[tuple[list[Frame], float]]:
    """Aggregated (root-first frames, weight) pairs of ``profile`` as seen in ``view``."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (expected one of {', '.join(VIEWS)})")
    frames = profile.frames
    for ids, weight in iter_stacks(profile, mode):
        yield [frames[i] for i in ids], weight
