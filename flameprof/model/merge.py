"""Merge profiles of several processes (the parts of one job, or profiles taken on several machines)
into one profile: times on a common epoch, frames, stacks and threads renumbered.

When the result holds more than one process, every stack is rooted at a process frame
(kind ``process``) named for the process's role (``main``, ``dataloader worker 0``, ``rank 1``,
else its command line), with `` on <host>`` when the processes ran on more than one host. Processes
with the same role share their frame, so the workers of successive epochs add up. The roots are in
the stacks themselves, so every view, renderer and export shows processes apart without knowing
about them; a single-process profile stays as it was.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .builder import ProfileBuilder
from .profile import Frame, Mark, ProcessInfo, Profile, ThreadInfo
from .records import short_command
from .trace import Trace, concat, shifted
from .validate import check_profile


def processes_of(profile: Profile, main_pid: int | None = None) -> list[ProcessInfo]:
    """The processes of ``profile`` with their roles filled in; a profile that lists none is one ``main``."""
    meta = profile.meta
    if not profile.processes:
        argv = meta.get("argv") or []
        return [
            ProcessInfo(
                int(meta.get("pid", 0)), "main", str(meta.get("host", "")), " ".join(str(a) for a in argv), 0
            )
        ]
    out = []
    for info in profile.processes:
        role = info.role or (
            "main" if info.pid == main_pid else short_command(info.cmdline) or f"pid {info.pid}"
        )
        out.append(ProcessInfo(info.pid, role, info.host, info.cmdline, info.ppid))
    return out


def _label(info: ProcessInfo, many_hosts: bool, many_mains: bool) -> str:
    """The process frame's name: the role, with the pid when several ``main``s would share it."""
    label = f"{info.role} (pid {info.pid})" if info.role == "main" and many_mains else info.role
    return f"{label} on {info.host}" if many_hosts else label


def counter_key(label: str, name: str) -> str:
    """A counter's name in a merged profile: ``<process>: <counter>`` (``main: rss_bytes``), or the
    counter's own where the process needs no label."""
    return f"{label}: {name}" if label else name


def has_process_roots(profile: Profile) -> bool:
    roots = profile.stack_frame[profile.stack_parent < 0]
    return any(profile.frames[int(f)].kind == "process" for f in roots)


def merge_profiles(profiles: list[Profile], main_pid: int | None = None) -> Profile:
    """One profile of all samples of ``profiles``; ``main_pid`` names which process is ``main``."""
    if not profiles:
        raise ValueError("nothing to merge")
    infos = [processes_of(p, main_pid) for p in profiles]
    n_processes = sum(len(i) for i in infos)
    hosts = sorted({i.host for group in infos for i in group})
    mains = Counter(i.host for group in infos for i in group if i.role == "main")
    epoch = min(float(p.meta.get("start_time", 0.0)) for p in profiles)
    builder = ProfileBuilder()
    threads: list[ThreadInfo] = []
    columns: dict[str, list[np.ndarray]] = {k: [] for k in ("time", "thread", "stack", "wall", "cpu", "gil")}
    marks: list[Mark] = []
    counters: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    traces: list[Trace] = []
    end = 0.0
    for profile, group in zip(profiles, infos):
        offset = float(profile.meta.get("start_time", 0.0)) - epoch
        end = max(end, offset + float(profile.meta.get("window_start", 0.0)) + profile.duration)
        root = -1
        label = ""
        if n_processes > 1 and len(group) == 1 and not has_process_roots(profile):
            label = _label(group[0], len(hosts) > 1, mains[group[0].host] > 1)
            root = builder.stack_id([builder.frame(Frame(label, kind="process"))])
        stack_map = _merge_stacks(profile, builder, root)
        thread_map = _merge_threads(profile, threads)
        columns["time"].append(profile.sample_time + offset)
        columns["thread"].append(thread_map[profile.sample_thread])
        columns["stack"].append(stack_map[profile.sample_stack + 1])
        columns["wall"].append(profile.sample_wall)
        columns["cpu"].append(profile.sample_cpu)
        columns["gil"].append(profile.sample_gil)
        marks.extend(Mark(m.time + offset, int(thread_map[m.thread]), m.name, m.value) for m in profile.marks)
        if profile.trace is not None:
            traces.append(shifted(profile.trace, offset))
        for name, (t, v) in profile.counters.items():
            key = counter_key(label, name)
            old_t, old_v = counters.get(key, (np.zeros(0), np.zeros(0)))
            counters[key] = (np.concatenate([old_t, t + offset]), np.concatenate([old_v, v]))
    time = np.concatenate(columns["time"])
    order = np.argsort(time, kind="stable")
    merged = Profile(
        frames=list(builder.frames),
        stack_parent=np.asarray(builder.stack_parent, dtype=np.int32),
        stack_frame=np.asarray(builder.stack_frame, dtype=np.int32),
        threads=threads,
        processes=[i for group in infos for i in group],
        sample_time=time[order],
        sample_thread=np.concatenate(columns["thread"])[order],
        sample_stack=np.concatenate(columns["stack"])[order],
        sample_wall=np.concatenate(columns["wall"])[order],
        sample_cpu=np.concatenate(columns["cpu"])[order],
        sample_gil=np.concatenate(columns["gil"])[order],
        marks=sorted(marks, key=lambda m: m.time),
        counters={k: _by_time(t, v) for k, (t, v) in counters.items()},
        meta=_merged_meta(profiles, infos, epoch, end, hosts),
        trace=concat(traces),
    )
    check_profile(merged)
    return merged


def _by_time(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(times, kind="stable")
    return times[order], values[order]


def _merge_threads(profile: Profile, threads: list[ThreadInfo]) -> np.ndarray:
    """Append the threads of ``profile`` that have samples or marks to ``threads``; returns the index map."""
    used = np.zeros(len(profile.threads), dtype=bool)
    used[profile.sample_thread] = True
    used[[m.thread for m in profile.marks if 0 <= m.thread < len(used)]] = True
    out = np.full(len(profile.threads), -1, dtype=np.int64)
    for i in np.nonzero(used)[0].tolist():
        out[i] = len(threads)
        threads.append(profile.threads[i])
    return out


def _merge_stacks(profile: Profile, builder: ProfileBuilder, root: int) -> np.ndarray:
    """Map of ``profile``'s stack ids (shifted by one: the empty stack -1 is at index 0, and maps to
    the process's root) into ``builder``.

    Only stacks some sample uses (and their ancestors) are taken: a forked child's part carries
    its parent's tables.
    """
    parents = profile.stack_parent.tolist()
    used = np.zeros(len(parents), dtype=bool)
    used[profile.sample_stack[profile.sample_stack >= 0]] = True
    for i in range(len(parents) - 1, -1, -1):
        if used[i] and parents[i] >= 0:
            used[parents[i]] = True
    frames = profile.frames
    out = np.full(len(parents) + 1, root, dtype=np.int64)
    for i in np.nonzero(used)[0].tolist():
        parent = parents[i]
        frame = builder.frame(frames[int(profile.stack_frame[i])])
        out[i + 1] = builder.stack_id((frame,), out[parent + 1] if parent >= 0 else root)
    return out


def _merged_meta(
    profiles: list[Profile], infos: list[list[ProcessInfo]], epoch: float, end: float, hosts: list[str]
) -> dict[str, Any]:
    main = next((p for p, group in zip(profiles, infos) if any(i.role == "main" for i in group)), profiles[0])
    meta = dict(
        main.meta,
        start_time=epoch,
        duration=end,
        hosts=hosts,
        process_count=sum(len(group) for group in infos),
        # seconds flameprof itself spent (sampling, writing parts) and seconds profiled, over all processes
        profiler_seconds=sum(
            float(p.meta.get("profiler_seconds", p.meta.get("sampler_busy", 0.0))) for p in profiles
        ),
        profiled_seconds=sum(float(p.meta.get("profiled_seconds", p.duration)) for p in profiles),
    )
    for key in ("final", "outlives_parent"):
        meta.pop(key, None)
    return meta
