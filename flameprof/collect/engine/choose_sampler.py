"""Which sampler runs: the C fast path (``flameprof._native``) when it imports, else the pure-Python one.

``FLAMEPROF_NATIVE=0`` forces the Python sampler; a failed native import warns once on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ...model.builder import ProfileBuilder
from .python_sampler import PythonSampler

if TYPE_CHECKING:
    from .c_sampler import CSampler

_warned = False


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        sys.stderr.write(f"flameprof: warning: {message}\n")


def native_available() -> bool:
    """True when the C sampler imports (it is optional: a failed build leaves the Python one)."""
    try:
        from ... import _native  # noqa: F401
    except ImportError:
        return False
    return True


def make_sampler(
    builder: ProfileBuilder, rate: float = 100.0, pid: int | None = None
) -> CSampler | PythonSampler:
    """The native sampler unless ``FLAMEPROF_NATIVE=0`` or it cannot be imported (then warn once)."""
    if os.environ.get("FLAMEPROF_NATIVE", "1") != "0":
        try:
            from .c_sampler import CSampler
        except ImportError as exc:
            _warn_once(
                f"the C sampler is unavailable ({exc}); using the slower pure-Python sampler, which sees "
                "a thread only where it lets the GIL go (Python work between blocking calls is under-counted)"
            )
        else:
            return CSampler(builder, rate, pid)
    return PythonSampler(builder, rate, pid)
