"""``flameprof attach --backend py-spy``: sample a process from outside with py-spy, read-only.

py-spy writes speedscope JSON (``--function``: frames carry the function's first line, as
flameprof's do; ``--idle``: idle threads are sampled too, so the weights are wall time). Its
per-thread sample lists are in time order, so ``importers/pyspy.py`` gives each sample its time
back from the running sum of the weights, and phases and steps can be found as in an injected
profile. py-spy cannot tell CPU from wall time, so a sample's CPU time is recorded as its wall
time; it cannot see ``nn.Module`` objects either, so there are no layer frames.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ...errors import FlameprofError
from ...model.records import ProcessInfo
from ..importers.pyspy import read_speedscope
from ..process_alive import alive
from .target import TargetProcess, explain_ptrace_failure

if TYPE_CHECKING:
    from ...model.profile import Profile


def find_pyspy() -> str | None:
    """py-spy installed beside this interpreter (a venv not on PATH), else the one on PATH."""
    return shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")


def record(
    target: TargetProcess,
    duration: float | None,
    rate: float,
    subprocesses: bool,
    note: Callable[[str], None] = lambda text: None,
) -> Profile:
    """Sample ``target`` (and its children with ``subprocesses``) for ``duration`` s or until Ctrl-C."""
    pyspy = find_pyspy()
    if pyspy is None:
        raise FlameprofError("py-spy is not installed (pip install py-spy)")
    with tempfile.TemporaryDirectory(prefix="flameprof-pyspy-") as tmp:
        out = os.path.join(tmp, "profile.speedscope.json")
        cmd = [
            pyspy,
            "record",
            "--pid",
            str(target.pid),
            "--rate",
            str(max(1, round(rate))),
            "--format",
            "speedscope",
            "--function",
            "--idle",
            "--full-filenames",
            "-o",
            out,
        ]
        if duration:
            cmd += ["--duration", str(max(1, math.ceil(duration)))]
        if subprocesses:
            cmd.append("--subprocesses")
        note(
            f"profiling process {target.pid} with py-spy "
            + (f"for {duration:g} s" if duration else "until Ctrl-C")
        )
        start = time.time()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        try:
            output, _ = proc.communicate()
        except KeyboardInterrupt:  # py-spy got the same Ctrl-C: it stops and writes what it has
            output, _ = proc.communicate()
        try:
            with open(out, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise FlameprofError(_failure(target, output)) from None
        except OSError as exc:
            raise FlameprofError(f"could not read py-spy's output: {exc.strerror or exc}") from None
    return from_speedscope(data, target, rate, start)


def _failure(target: TargetProcess, output: str) -> str:
    if "Permission denied" in output or "Operation not permitted" in output:
        return explain_ptrace_failure(target.pid, target.uid)
    if not alive(target.pid):
        return f"process {target.pid} exited before py-spy could sample it"
    last = [line.strip() for line in output.splitlines() if line.strip()][-1:] or ["no output"]
    return f"py-spy failed: {last[0][:200]}"


def from_speedscope(data: bytes, target: TargetProcess, rate: float, start_time: float) -> Profile:
    """A Profile from py-spy's speedscope output, described as an attach of ``target``.

    Without ``--subprocesses`` py-spy names no process, so those threads are the target's.
    """
    profile = read_speedscope(data, "py-spy output", strict=False)
    profile.threads = [t if t.pid else replace(t, pid=target.pid) for t in profile.threads]
    host = socket.gethostname()
    argv = _proc_argv(target.pid)
    processes = {p.pid: p for p in profile.processes}
    main = processes.get(target.pid, ProcessInfo(target.pid, "main", cmdline=" ".join(argv)))
    processes[target.pid] = replace(main, host=host)
    profile.processes = [replace(p, host=host) for p in processes.values()]
    end = profile.sample_time + profile.sample_wall
    profile.meta.update(
        collector="attach",
        backend="py-spy",
        sampler="py-spy",
        rate=rate,
        start_time=start_time,
        duration=float(end.max()) if profile.num_samples else 0.0,
        pid=target.pid,
        host=host,
        python=target.version_text,
        cwd=_proc_cwd(target.pid),
        argv=argv,
        cpu_time="same as wall (py-spy)",
    )
    return profile


def _proc_cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _proc_argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [part.decode("utf-8", "replace") for part in fh.read().split(b"\0") if part]
    except OSError:
        return []
