"""The traced window's events as Chrome trace / Perfetto tracks, next to the samples' tracks: per host
thread one track of its ops and annotations, per device stream one track of its kernels and copies,
each event with its layer and phase (and shapes, FLOPs or bytes) in its arguments."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from ..model.phase_names import PHASES
from ..model.trace import DEVICE_KINDS, EVENT_KINDS, Trace

DEVICE_PID_BASE = 1_000_000_000  # device tracks get pids of their own, far from any real pid


def trace_track_events(
    trace: Trace, next_tid: int, meta: Callable[[str, int, int, str, int], None]
) -> Iterator[str]:
    """JSON lines of ``trace``'s events; ``meta(kind, pid, tid, name, sort)`` names each new track, and
    host tracks take tids from ``next_tid`` on."""
    ev = trace.events
    names = [json.dumps(n) for n in trace.names]
    tracks: dict[tuple[int, int, int], tuple[int, int]] = {}
    columns = [
        ev[k].tolist() for k in ("kind", "name", "start", "dur", "pid", "tid", "device", "layer", "phase")
    ]
    flops, size, shapes = ev["flops"].tolist(), ev["bytes"].tolist(), ev["shapes"].tolist()
    for i, (kind, name, start, dur, pid, tid, device, layer, phase) in enumerate(zip(*columns)):
        on_device = kind in DEVICE_KINDS
        key = (device if on_device else -1, pid if not on_device else 0, tid)
        track = tracks.get(key)
        if track is None:
            if on_device:
                track = (DEVICE_PID_BASE + device, tid)
                if not any(k[0] == device for k in tracks):
                    meta(
                        "process_name",
                        track[0],
                        0,
                        f"device {device} (traced window)",
                        DEVICE_PID_BASE + device,
                    )
                meta("thread_name", track[0], tid, f"stream {tid}", tid)
            else:
                track = (pid, next_tid + len(tracks))
                meta("thread_name", pid, track[1], f"thread {tid}: traced ops", -2)
            tracks[key] = track
        args = {"layer": trace.names[layer] if layer >= 0 else "", "phase": PHASES[phase]}
        if shapes[i] >= 0:
            args["shapes"] = trace.names[shapes[i]]
        if flops[i]:
            args["flops"] = flops[i]
        if size[i]:
            args["bytes"] = size[i]
        yield (
            f'{{"ph":"X","cat":"{EVENT_KINDS[kind]}","name":{names[name]},"pid":{track[0]},"tid":{track[1]},'
            f'"ts":{start * 1e6:.3f},"dur":{dur * 1e6:.3f},"args":{json.dumps(args)}}}'
        )
