"""The one warning line about input a reader skipped: its own module, so that a reader as light as
``collapse perf`` reports it without importing the model."""

from __future__ import annotations

import sys

from ...errors import FlameprofError


def note_skipped(
    meta: dict | None,
    source: str,
    skipped: int,
    first: str,
    what: str = "malformed line",
    found: bool = True,
) -> None:
    """Record skipped input in ``meta['skipped_lines']`` and print the one warning line about it; when
    nothing was ``found`` besides, that is the one error line instead (not a warning, then an error)."""
    if not skipped:
        return
    if not found:
        raise FlameprofError(f"{source}: no stacks found; skipped {skipped} {what}(s), first at {first}")
    if meta is not None:
        meta["skipped_lines"] = skipped
    print(f"flameprof: warning: {source}: skipped {skipped} {what}(s), first at {first}", file=sys.stderr)
