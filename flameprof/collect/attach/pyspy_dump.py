"""Every thread's current stack, read from outside by ``py-spy dump``: ``flameprof dump``'s source.

py-spy reads the process's memory without stopping it for long and runs no code in it. With
``--locals`` it also gives the class of each ``nn.Module`` being called (``self`` of
``Module._wrapped_call_impl``): the layers a thread is in, by class (attribute names would need
code run in the process).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field

from ...errors import FlameprofError
from ...model.records import Frame
from .pyspy import find_pyspy
from .target import python_descendants

DUMP_TIMEOUT = 30.0
_CALL = ("Module._wrapped_call_impl", "_wrapped_call_impl")
_OBJECT = re.compile(r"^<(\w+) at 0x[0-9a-f]+>$")


@dataclass
class ThreadStack:
    """One thread of a dumped process: its frames root first, and the module classes it is in."""

    pid: int
    tid: int
    name: str
    active: bool
    frames: list[Frame] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)


def dump_stacks(pid: int, subprocesses: bool = False) -> list[ThreadStack]:
    """The stacks of ``pid``'s threads (and of its Python descendants', with ``subprocesses``)."""
    pyspy = find_pyspy()
    if pyspy is None:
        raise FlameprofError("py-spy is not installed (pip install py-spy)")
    threads = _dump(pyspy, pid)
    for child in python_descendants(pid) if subprocesses else ():
        try:
            threads += _dump(pyspy, child.pid)
        except FlameprofError:  # a child that ended meanwhile
            pass
    return threads


def _dump(pyspy: str, pid: int) -> list[ThreadStack]:
    command = [pyspy, "dump", "--pid", str(pid), "--json", "--locals"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=DUMP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise FlameprofError(f"py-spy did not read process {pid} within {DUMP_TIMEOUT:g} s") from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        raise FlameprofError(f"py-spy could not read process {pid}: {(lines or ['no output'])[-1][:200]}")
    try:
        threads = json.loads(proc.stdout)
    except ValueError:
        raise FlameprofError(f"could not read py-spy's dump of process {pid}") from None
    return [_thread(t) for t in threads if isinstance(t, dict)]


def _thread(data: dict) -> ThreadStack:
    out = ThreadStack(
        int(data.get("pid") or 0),
        int(data.get("os_thread_id") or 0),
        str(data.get("thread_name") or ""),
        bool(data.get("active")),
    )
    for raw in reversed(data.get("frames") or []):  # py-spy lists the leaf first
        name = str(raw.get("name") or "?")
        out.frames.append(Frame(name, str(raw.get("filename") or ""), int(raw.get("line") or 0), "python"))
        if name in _CALL:
            for local in raw.get("locals") or []:
                match = _OBJECT.match(str(local.get("repr") or "")) if local.get("name") == "self" else None
                if match:
                    out.layers.append(match.group(1))
    return out
