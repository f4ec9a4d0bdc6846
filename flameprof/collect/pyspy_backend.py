"""``flameprof attach --backend py-spy``: sample a process from outside with py-spy, read-only.

py-spy writes speedscope JSON (``--function``: frames carry the function's first line, as
flameprof's do; ``--idle``: idle threads are sampled too, so the weights are wall time). Its
per-thread sample lists are in time order, so each sample gets its time back from the running sum
of the weights and phases and steps can be found as in an injected profile. py-spy cannot tell CPU
from wall time, so a sample's CPU time is recorded as its wall time; it cannot see ``nn.Module``
objects either, so there are no layer frames.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Callable

from ..errors import FlameprofError
from ..records import Frame, ProcessInfo, ProfileBuilder
from .target_process import TargetProcess, alive, explain_ptrace_failure

if TYPE_CHECKING:
    from ..model import Profile

_PROFILE_NAME = re.compile(r'(?:Process (\d+) )?Thread (\d+)(?: "(.*)")?$')
_PROCESS_FRAME = re.compile(r'process (\d+):"?(.*?)"?$')
_THREAD_FRAME = re.compile(r"thread \((?:0x)?[0-9a-fA-F]+\)")


def record(target: TargetProcess, duration: float | None, rate: float, subprocesses: bool,
           note: Callable[[str], None] = lambda text: None) -> "Profile":
    """Sample ``target`` (and its children with ``subprocesses``) for ``duration`` s or until Ctrl-C."""
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        raise FlameprofError("py-spy is not installed (pip install py-spy)")
    with tempfile.TemporaryDirectory(prefix="flameprof-pyspy-") as tmp:
        out = os.path.join(tmp, "profile.speedscope.json")
        cmd = [pyspy, "record", "--pid", str(target.pid), "--rate", str(max(1, round(rate))), "--format",
               "speedscope", "--function", "--idle", "--full-filenames", "-o", out]
        if duration:
            cmd += ["--duration", str(max(1, math.ceil(duration)))]
        if subprocesses:
            cmd.append("--subprocesses")
        note(f"profiling process {target.pid} with py-spy " + (f"for {duration:g} s" if duration else "until Ctrl-C"))
        start = time.time()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        try:
            output, _ = proc.communicate()
        except KeyboardInterrupt:  # py-spy got the same Ctrl-C: it stops and writes what it has
            output, _ = proc.communicate()
        try:
            with open(out, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            raise FlameprofError(_failure(target, output)) from None
        except (OSError, ValueError) as exc:
            raise FlameprofError(f"could not read py-spy's output: {exc}") from None
    return from_speedscope(doc, target, rate, start)


def _failure(target: TargetProcess, output: str) -> str:
    if "Permission denied" in output or "Operation not permitted" in output:
        return explain_ptrace_failure(target.pid, target.uid)
    if not alive(target.pid):
        return f"process {target.pid} exited before py-spy could sample it"
    last = [line.strip() for line in output.splitlines() if line.strip()][-1:] or ["no output"]
    return f"py-spy failed: {last[0][:200]}"


def from_speedscope(doc: dict, target: TargetProcess, rate: float, start_time: float) -> "Profile":
    """A Profile from py-spy's speedscope JSON: one thread per speedscope profile, samples in order."""
    try:
        shared = doc["shared"]["frames"]
        profiles = doc["profiles"]
    except (KeyError, TypeError):
        raise FlameprofError("py-spy wrote an unexpected speedscope file (no shared frames or profiles)") from None
    host = socket.gethostname()
    builder = ProfileBuilder({"collector": "attach", "backend": "py-spy", "sampler": "py-spy", "rate": rate,
                              "start_time": start_time, "pid": target.pid, "python": target.version_text,
                              "cwd": _proc_cwd(target.pid), "argv": _proc_argv(target.pid),
                              "host": host, "cpu_time": "same as wall (py-spy)"})
    frame_ids: list[int | None] = []
    commands: dict[int, str] = {target.pid: " ".join(builder.meta["argv"])}
    for f in shared:
        name, file, line = str(f.get("name", "?")), str(f.get("file") or ""), int(f.get("line") or 0)
        process = _PROCESS_FRAME.match(name) if not file else None
        if process:
            commands[int(process.group(1))] = process.group(2)
        if not file and (process or _THREAD_FRAME.match(name)):
            frame_ids.append(None)  # py-spy's synthetic root frames: kept as the sample's process and thread
        else:
            frame_ids.append(builder.frame(Frame(name, file, line, "python")))
    end = 0.0
    for prof in profiles:
        m = _PROFILE_NAME.match(str(prof.get("name", "")))
        pid = int(m.group(1)) if m and m.group(1) else target.pid
        thread = builder.thread_id(pid, int(m.group(2)) if m else 0, (m.group(3) or "") if m else "")
        t = float(prof.get("startValue") or 0.0)
        for stack, weight in zip(prof.get("samples", ()), prof.get("weights", ())):
            weight = float(weight)
            t += weight
            try:
                sid = builder.stack_id([frame_ids[i] for i in stack if frame_ids[i] is not None])
            except (IndexError, TypeError):
                raise FlameprofError("py-spy wrote a sample that refers to an unknown frame") from None
            builder.add_sample(t, thread, sid, weight, weight)
        end = max(end, t)
    for pid in sorted({t.pid for t in builder.threads} | {target.pid}):
        role = "main" if pid == target.pid else "child"
        builder.process(ProcessInfo(pid, role, host, commands.get(pid, ""), target.pid if role == "child" else 0))
    builder.meta["duration"] = end
    return builder.build()


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
