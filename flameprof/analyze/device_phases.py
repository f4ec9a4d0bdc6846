"""The device's time per phase for the whole run, from the ``device`` marks stamped at the loop's
phase boundaries (collect/engine/device_phases.py): per steady-state step, the device's seconds in
forward, backward, the optimizer and the rest, its idle time while the host waited for data, and
how far it ran behind the host.

Two consecutive stamps bound a segment, named for the boundary that opens it: after ``data`` the host
waits for a batch and launches nothing, so the device's elapsed time there is its idle time waiting
for data (``data.wait``); after ``batch`` it runs the forward (and the loss) until ``backward``, then
the backward, the optimizer between ``optimizer`` and ``optimizer_end``, and ``other`` work between
the others (the outermost module's forward opens a forward too, in a loop without a DataLoader). A
segment belongs to the step its opening stamp falls in; steps with an evaluation or a checkpoint in
them are left out. The device's lag behind the
host at a stamp is its time there less the host's, less the smallest such lag of the run: near 0,
the device had nothing queued when the host got there (it waited for the host to launch work).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from .steps import StepTable

MARK, CLOCK_MARK = "device", "device_clock"
SEGMENTS = ("data.wait", "forward", "backward", "optimizer", "other")
_OPENS = {
    "data": "data.wait",
    "batch": "forward",
    "forward": "forward",
    "backward": "backward",
    "backward_end": "other",
    "optimizer": "optimizer",
    "optimizer_end": "other",
}


@dataclass(frozen=True)
class DeviceTimeSection:
    """Seconds per steady-state step (means): the device's per segment, and the host's over the same
    stamps; the device's step, the share of it spent idle waiting for data, and its median lag
    behind the host at the step's last stamp."""

    clock: str  # cuda, or host (the host's own time: a CPU run)
    steps: int  # steady-state steps measured
    device: dict[str, float]
    host: dict[str, float]
    step_seconds: float
    data_wait_percent: float
    lag_seconds: float


def device_marks(profile: Profile, thread: int) -> tuple[np.ndarray, list[str], np.ndarray, str]:
    """(host times, boundaries, device times) of ``thread``'s device marks in time order, and the
    clock that stamped them."""
    rows, clock = [], ""
    for m in profile.marks:
        if m.thread != thread:
            continue
        if m.name == CLOCK_MARK:
            clock = m.value
        elif m.name == MARK:
            boundary, _, stamp = m.value.partition(" ")
            try:
                rows.append((m.time, boundary, float(stamp)))
            except ValueError:
                continue  # a mark this version cannot read
    rows.sort(key=lambda r: r[0])
    host = np.array([r[0] for r in rows], dtype=np.float64)
    device = np.array([r[2] for r in rows], dtype=np.float64)
    return host, [r[1] for r in rows], device, clock


def device_time(profile: Profile, steps: StepTable) -> DeviceTimeSection | None:
    """The section for the loop thread's steady-state steps; None without device marks or steps."""
    host, boundaries, device, clock = device_marks(profile, steps.thread)
    if len(host) < 2 or not steps.count:
        return None
    step_of = np.searchsorted(steps.bounds, host[:-1], "right") - 1  # the step each segment opens in
    inside = (step_of >= 0) & (step_of < steps.count)
    # steady-state steps without an evaluation or a checkpoint in them (those are no training)
    apart = (
        steps.phase_seconds[:, [LEAF_PHASES.index("eval"), LEAF_PHASES.index("checkpoint")]].sum(axis=1) > 0
    )
    counted = steps.steady & ~apart
    steady = np.zeros(len(step_of), dtype=bool)
    steady[inside] = counted[step_of[inside]]
    measured = np.unique(step_of[steady])
    if not len(measured):
        return None
    segment = np.array([SEGMENTS.index(_OPENS.get(b, "other")) for b in boundaries[:-1]])
    device_dt, host_dt = np.diff(device), np.diff(host)
    per_device = np.bincount(segment[steady], device_dt[steady], len(SEGMENTS)) / len(measured)
    per_host = np.bincount(segment[steady], host_dt[steady], len(SEGMENTS)) / len(measured)
    lag = (device - host) - float((device - host).min())
    # each measured step's last stamp: the device's lag behind the host as the step ends
    last = np.array([np.nonzero(steady & (step_of == s))[0].max() + 1 for s in measured.tolist()])
    step_seconds = float(per_device.sum())
    return DeviceTimeSection(
        clock=clock,
        steps=int(len(measured)),
        device=dict(zip(SEGMENTS, per_device.tolist())),
        host=dict(zip(SEGMENTS, per_host.tolist())),
        step_seconds=step_seconds,
        data_wait_percent=100 * float(per_device[0]) / step_seconds if step_seconds > 0 else 0.0,
        lag_seconds=float(np.median(lag[last])),
    )
