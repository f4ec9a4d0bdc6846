"""glibc's malloc tuned, per command, for the big arrays of whole traces and profiles

glibc maps a block of 128 KB or more on its own and unmaps it when freed, but after the first such
free it raises that threshold to the freed size, up to 32 MB. Arrays of millions of values (10 to
40 MB each for a trace of gigabytes) then land either side of it, and each command wants one side:

* ``import`` has a memory bound: a fixed threshold of 8 MB keeps its temporaries mapped, so what
  it frees leaves the process instead of holes in its heap. Measured importing a 2 GB
  torch.profiler trace: peak 782 -> 688 MB, 6 % more time; a 300 MB trace: the same time.
* the commands that read profiles (``report``, ``render``, ``diff``, ``check``, ``merge``) have time
  targets: every array from the heap, and what is freed kept there for the next one, so that each
  is not faulted in afresh page by page. Measured reporting that trace's profile: 5.1-5.5 s ->
  4.1-4.7 s (the kernel's time 2.1-2.6 s -> 0.9-1.3 s), peak 975 -> 1067 MB.

Only a command's own process calls this, never one that runs a profiled program.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
SETTINGS = {
    "import": ((M_MMAP_THRESHOLD, 8 << 20),),
    "reuse": ((M_MMAP_THRESHOLD, 1 << 30), (M_TRIM_THRESHOLD, (1 << 31) - 1)),
}


def tune(command: str) -> bool:
    """Set glibc's thresholds for ``command`` (``import``'s, or the readers' for any other); False
    where the C library is not glibc (nothing is changed there)."""
    try:
        # the process's own symbols, where the C library's are: no search for the library by name
        # (ctypes.util's import alone was 10 ms of every command's start)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all([bool(mallopt(key, value)) for key, value in SETTINGS.get(command, SETTINGS["reuse"])])
