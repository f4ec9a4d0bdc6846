"""Big arrays straight from the OS and back, in the commands that read whole traces and profiles

glibc's malloc maps a block of 128 KB or more on its own and unmaps it when freed, but after the
first such free it raises that threshold to the freed size, up to 32 MB: a reader's temporaries of
millions of values (10 to 30 MB each for a trace of gigabytes) then come from the heap, and its
holes stay in the process's memory. A fixed threshold of 8 MB keeps them mapped, so memory in use
is memory held. Measured importing a 2 GB torch.profiler trace: peak 782 -> 688 MB, 6 % more time;
a 300 MB trace: the same time (its temporaries are mostly below 8 MB).

Only flameprof's own commands call this, never code that runs inside a profiled program.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD = 8 << 20


def map_big_arrays() -> bool:
    """Fix glibc's mmap threshold at ``THRESHOLD``; False where the C library is not glibc (nothing
    is changed there)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))
