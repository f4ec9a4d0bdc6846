"""Memory over the traced window: the allocator's bytes in use over time on the busiest device,
stacked by the layer whose ops allocated them, as MegEngine's memory flow shows where memory peaks.

Each allocation adds its bytes to the layer of the op it happened in; a free takes them from the
layer that allocated the block when the events carry block addresses (as Kineto's do), else from
the layer of the op that freed it (so a band can dip below 0: the drawing clips it). What was
allocated before the window is a band of its own, and layers past the ``TOP`` largest are
``(other layers)``. The bands add up to the allocator's total at every event. The series is thinned
to ``POINTS`` events (each kept point a real event, so the sums are exact where drawn; the peak is
always kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.trace import OP, Trace

TOP = 8
POINTS = 2000
BEFORE, OTHER, NO_LAYER = "(before the window)", "(other layers)", "(no layer)"


@dataclass(frozen=True)
class MemoryFlow:
    device: str  # ``cpu`` or ``device N``
    times: list[float]  # seconds, the samples' time base
    bands: dict[str, list[float]]  # bytes per band at each time, bottom first
    peak: float
    peak_time: float
    peak_layer: str
    peak_op: str


def busiest_device(trace: Trace) -> int:
    """The device whose allocator the window's memory events come from: the first GPU, else the host."""
    devices = trace.memory["device"]
    gpu = devices >= 0
    return int(devices[gpu][0]) if gpu.any() else -1


def _allocating(names: list[str], deltas: list[float], addresses: list[int]) -> list[str]:
    """Each event's band when the events carry block addresses: an allocation's own layer; a free's,
    the layer that allocated the block (``BEFORE`` for a block allocated before the window)."""
    owner: dict[int, str] = {}
    out = []
    for name, d, addr in zip(names, deltas, addresses):
        if d >= 0:
            owner[addr] = name
            out.append(name)
        else:
            out.append(owner.pop(addr, BEFORE))
    return out


def memory_flow(trace: Trace) -> MemoryFlow | None:
    """The window's memory over time; None without memory events."""
    mem, ev = trace.memory, trace.events
    if not len(mem["time"]):
        return None
    device = busiest_device(trace)
    rows = np.flatnonzero(mem["device"] == device)
    rows = rows[np.argsort(mem["time"][rows], kind="stable")]
    delta, total, event = mem["delta"][rows], mem["total"][rows], mem["event"][rows]
    layer = np.where(event >= 0, ev["layer"][np.maximum(event, 0)], -1)
    names = [trace.name_of(int(k)) or NO_LAYER for k in layer.tolist()]
    addresses = mem.get("addr")
    if addresses is not None:  # a free goes to the layer that allocated its block
        names = _allocating(names, delta.tolist(), addresses[rows].tolist())
    kinds = sorted(set(names))
    index = np.array([kinds.index(n) for n in names], dtype=np.int64)
    held = np.zeros((len(kinds), len(rows)))
    held[index, np.arange(len(rows))] = delta
    held = np.cumsum(held, axis=1)
    peak_at = int(np.argmax(total))
    # the largest bands at the peak, then what they hold anywhere else
    order = sorted(range(len(kinds)), key=lambda k: (-held[k, peak_at], -held[k].max()))
    top, rest = order[:TOP], order[TOP:]
    before = total[0] - delta[0]
    bands = {BEFORE: np.full(len(rows), before) + (held[kinds.index(BEFORE)] if BEFORE in kinds else 0.0)}
    bands |= {kinds[k]: held[k] for k in top if kinds[k] != BEFORE}
    rest = [k for k in rest if kinds[k] != BEFORE]
    if rest:
        bands[OTHER] = held[rest].sum(axis=0)
    keep = np.unique(np.r_[np.linspace(0, len(rows) - 1, min(POINTS, len(rows))).astype(np.int64), peak_at])
    op = int(event[peak_at])
    while op >= 0 and ev["kind"][op] != OP:  # the op around an allocation made in a runtime call
        op = int(ev["parent"][op])
    return MemoryFlow(
        "cpu" if device < 0 else f"device {device}",
        mem["time"][rows][keep].tolist(),
        {name: series[keep].tolist() for name, series in bands.items()},
        float(total[peak_at]),
        float(mem["time"][rows][peak_at]),
        names[peak_at] if event[peak_at] >= 0 else "",
        trace.name_of(int(ev["name"][op])) if op >= 0 else "",
    )
