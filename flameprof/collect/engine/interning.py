"""How a sampler turns a code object, a thread and a truncated stack into the profile's ids.

Shared by the C and the pure-Python sampler, so both name frames and threads alike. Frames of
flameprof's own package are skipped, except the shipped examples (user code for ``flameprof demo``).
"""

from __future__ import annotations

import os
import sys
import threading

from ...model.builder import ProfileBuilder
from ...model.records import Frame

MAX_DEPTH = 1024
_PACKAGE_FILE = sys.modules["flameprof"].__file__
assert _PACKAGE_FILE is not None  # a regular package, never a namespace one
FLAMEPROF_DIR = os.path.dirname(os.path.abspath(_PACKAGE_FILE)) + os.sep
EXAMPLES_DIR = FLAMEPROF_DIR + "examples" + os.sep  # shipped user code (flameprof demo): sampled as such
SKIP = -1
BOUNDARY = -2


def code_frame_id(builder: ProfileBuilder, boundary_codes: set, code) -> int:
    """The builder frame id of ``code``: ``BOUNDARY`` for the frames that run the target (flameprof's
    runner, runpy's), ``SKIP`` for flameprof's own other frames."""
    if code in boundary_codes:
        return BOUNDARY
    filename = code.co_filename
    if filename.startswith(FLAMEPROF_DIR) and not filename.startswith(EXAMPLES_DIR):
        return SKIP
    name = getattr(code, "co_qualname", code.co_name)
    return builder.frame(Frame(name, filename, code.co_firstlineno, "python"))


def thread_identity(builder: ProfileBuilder, pid: int, ident: int, native_id: int = 0) -> tuple[int, int]:
    """(builder thread index, native id for its CPU clock or 0) of the thread ``ident``: a live one,
    or one that may be gone when its ``native_id`` was recorded with it."""
    thread = threading._active.get(ident)  # type: ignore[attr-defined]
    native_id = native_id or getattr(thread, "native_id", None) or 0
    name = thread.name if thread is not None else f"Thread-{ident}"
    return builder.thread_id(pid, native_id or ident, name), native_id


def sampled_thread(builder: ProfileBuilder, pid: int, ident: int) -> tuple[int, int] | None:
    """``thread_identity`` for a sampler, or None while ``ident`` may be a thread that ``threading``
    is still starting: it is not registered under its ident yet, so its name and native id are
    unknown, and a sampler that met it that early would keep it nameless; it is sampled from a
    later tick on."""
    if ident not in threading._active and threading._limbo:  # type: ignore[attr-defined]
        return None
    return thread_identity(builder, pid, ident)


def truncation_marker(builder: ProfileBuilder, dropped: int) -> int:
    return builder.frame(Frame(f"[{dropped} frames truncated]", kind="marker"))
