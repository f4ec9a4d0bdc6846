"""Open any profile input by content: a ``.flameprof`` file or collapsed stacks (``-`` is stdin)."""

from __future__ import annotations

import io
import sys

from ..errors import FlameprofError
from ..model import Profile
from .. import storage
from .folded_import import read_folded


def load_input(path: str, strict: bool = True) -> Profile:
    """Load ``path`` as a ``.flameprof`` profile or, failing the zip signature, as folded text."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except IsADirectoryError:
        raise FlameprofError(f"{path} is a directory, not a profile") from None
    except OSError as exc:
        raise FlameprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    source = "<stdin>" if path == "-" else path
    if storage.is_flameprof_file(data[:4]):
        return storage.loads(data, source)
    if b"\x00" in data[:4096]:
        raise FlameprofError(f"{source}: not a flameprof profile or folded text (binary data)")
    text = io.StringIO(data.decode("utf-8", errors="replace"))
    profile = read_folded(text, source, strict)
    if not profile.num_samples:
        raise FlameprofError(f"{source}: no stacks found")
    return profile
