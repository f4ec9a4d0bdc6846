"""The light half of the profile model: frame, thread, process and mark records, and the names
of the sample columns. No numpy here, so the sampler can import it inside a profiled program cheaply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

# Frame kinds. ``python``: a Python function; ``native``: C/C++ code (perf, py-spy --native);
# ``layer``: an nn.Module call; ``scope``: a user scope; ``process``/``thread``: synthetic roots;
# ``marker``: flameprof's own notes such as a truncated stack.
FRAME_KINDS = ("python", "native", "layer", "scope", "process", "thread", "marker")
# The per-sample columns of a profile, one row per observation of one thread.
SAMPLE_COLUMNS = ("sample_time", "sample_thread", "sample_stack", "sample_wall", "sample_cpu", "sample_gil")
# A sample's ``sample_gil``: its thread's part of the GIL at its tick. Only the C sampler can tell
# (native/sampler.c, gil_states): the pure-Python sampler's samples, other tools' files and files
# written before the column are unknown.
GIL_NOT_HELD = 0  # neither held it nor waited for it (ran C code without it, was blocked or idle)
GIL_HELD = 1
GIL_UNKNOWN = 2
GIL_WAITING = 3  # waited for it while another thread held it


@dataclass(frozen=True)
class Frame:
    """One stack frame. ``line`` is the function's first line, so all lines of a function merge."""

    name: str
    file: str = ""
    line: int = 0
    kind: str = "python"


# Frames the collector puts on a thread's stack (as scopes) where the stack alone cannot tell: the
# closure an optimizer's ``step`` calls back (its frames keep the phases they would have without the
# optimizer), a region where autograd is off (``torch.no_grad``, ``torch.inference_mode``), and one
# where ``torch.enable_grad`` turns it back on (LBFGS runs its closure so).
CLOSURE = Frame("[optimizer closure]", kind="marker")
NO_GRAD = Frame("[no grad]", kind="marker")
GRAD = Frame("[grad]", kind="marker")


@dataclass(frozen=True)
class ThreadInfo:
    pid: int
    tid: int
    name: str = ""


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    role: str = "main"
    host: str = ""
    cmdline: str = ""
    ppid: int = 0


def short_command(cmdline: str, limit: int = 60) -> str:
    """A command line short enough to name a process: base names of the program and of path arguments."""
    words = [os.path.basename(w) if os.sep in w and not w.startswith("-") else w for w in cmdline.split(" ")]
    text = " ".join(words).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Mark(NamedTuple):
    """A timestamped event on a thread: a step boundary, a phase hint from a user scope, ...

    A named tuple: marks are made in the program's hot loop (one per optimizer step), and a
    tuple is built several times faster than a frozen dataclass."""

    time: float
    thread: int
    name: str
    value: str = ""
