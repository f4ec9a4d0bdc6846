"""The figures Holistic Trace Analysis (HTA) gives for one GPU trace, and flameprof's for the same
trace, in one shape: percentages keyed alike, so a test or ``scripts/compare_hta.py`` can put them
side by side.

- ``temporal``: idle, computation and non-computation time, % of the device's span;
- ``kernel_types``: time by kernel type and their overlaps, % of their sum (memory included);
- ``idle_streams``: per stream, its idle time by cause, % of that stream's idle time;
- ``overlap``: % of communication time that overlaps computation (None without communication).
"""

from __future__ import annotations

import math
import shutil
import tempfile


def hta_figures(path: str) -> dict:
    """HTA's own analyses of the trace at ``path`` (``pip install HolisticTraceAnalysis``)."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as directory:
        shutil.copy(path, directory)  # HTA reads every trace of a directory, one per rank
        analyzer = TraceAnalysis(trace_dir=directory)
        rank = next(iter(analyzer.t.traces))
        temporal = analyzer.get_temporal_breakdown(visualize=False).iloc[0]
        types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        idle, _ = analyzer.get_idle_time_breakdown(ranks=[rank], visualize=False)
        overlap = analyzer.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"]
    streams: dict[int, dict[str, float]] = {}
    for row in idle.itertuples():
        streams.setdefault(int(row.stream), {})[str(row.idle_category)] = 100 * float(row.idle_time_ratio)
    return {
        "temporal": {
            "idle": float(temporal["idle_time_pctg"]),
            "computation": float(temporal["compute_time_pctg"]),
            "non_computation": float(temporal["non_compute_time_pctg"]),
        },
        "kernel_types": {str(r.kernel_type).lower(): float(r.percentage) for r in types.itertuples()},
        "idle_streams": streams,
        "overlap": None if overlap is None or math.isnan(overlap) else float(overlap),
    }


def flameprof_figures(path: str, launched_only: bool = False) -> dict | None:
    """flameprof's reading of the same trace (the busiest device of the busiest process); with
    ``launched_only``, of the device events whose runtime call the trace holds, as HTA reads it.
    None when the trace holds no device event."""
    from flameprof.analyze.device_breakdown import device_times
    from flameprof.collect.importers.kineto import decode_document, read_trace
    from flameprof.collect.importers.load import read_bytes

    trace, _ = read_trace(decode_document(read_bytes(path), path), path)
    devices = device_times(trace, launched_only)
    if not devices:
        return None
    device = devices[0]
    total = sum(device.by_type.values())
    streams = {}
    for stream in device.streams:
        if stream.idle > 0:
            streams[stream.stream] = {
                cause: 100 * getattr(stream, cause) / stream.idle
                for cause in ("host_wait", "kernel_wait", "other")
            }
    return {
        "temporal": {
            "idle": device.percent(device.idle),
            "computation": device.percent(device.computation),
            "non_computation": device.percent(device.non_computation),
        },
        "kernel_types": {name: 100 * seconds / total for name, seconds in device.by_type.items()},
        "idle_streams": streams,
        "overlap": device.overlap_percent,
    }


def differences(ours: dict, theirs: dict) -> dict[str, float]:
    """Every figure's difference in points (absent on one side: the other's value)."""
    out: dict[str, float] = {}
    for section in ("temporal", "kernel_types"):
        for key in set(ours[section]) | set(theirs[section]):
            out[f"{section}.{key}"] = ours[section].get(key, 0.0) - theirs[section].get(key, 0.0)
    for stream in set(ours["idle_streams"]) | set(theirs["idle_streams"]):
        a, b = ours["idle_streams"].get(stream, {}), theirs["idle_streams"].get(stream, {})
        for cause in ("host_wait", "kernel_wait", "other"):
            out[f"idle_streams.{stream}.{cause}"] = a.get(cause, 0.0) - b.get(cause, 0.0)
    if ours["overlap"] is not None or theirs["overlap"] is not None:
        out["overlap"] = (ours["overlap"] or 0.0) - (theirs["overlap"] or 0.0)
    return out
