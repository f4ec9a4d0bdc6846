"""The live view of a running job (``flameprof top``): the last N steps' phase shares and step time,
the top layers and functions over those steps, and what the DataLoader workers did, as a screen of
text, or as one plain line for a log."""

from __future__ import annotations

import numpy as np

from ..analyze.report import Report, report_of
from ..model.profile import Profile
from .report import startup_line

PHASE_SHORT = {
    "data": "data",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "opt",
    "sync": "sync",
    "comm": "comm",
    "eval": "eval",
    "checkpoint": "ckpt",
    "other": "other",
}


def recent(profile: Profile, steps: int) -> tuple[Profile, int]:
    """``profile`` cut to its last ``steps`` steps (by the step marks), and how many steps it had in
    all; the whole profile while it has fewer."""
    ends = sorted(m.time for m in profile.marks if m.name == "step")
    if len(ends) <= steps:
        return profile, len(ends)
    cut = ends[-steps - 1]
    profile.select(profile.sample_time > cut)
    profile.marks = [m for m in profile.marks if m.time >= cut]
    return profile, len(ends)


def _phases(r: Report) -> str:
    source = r.basis_phases()
    return "  ".join(f"{short} {source[name].percent:.1f}%" for name, short in PHASE_SHORT.items())


def _step_text(r: Report) -> str:
    steady = r.steps.steady
    if steady.p50 is None or steady.p90 is None or steady.max is None:
        return "no steps yet"
    return f"p50 {steady.p50 * 1e3:.1f} ms, p90 {steady.p90 * 1e3:.1f} ms, max {steady.max * 1e3:.1f} ms"


def live_lines(profile: Profile, steps: int, seconds: float, top: int = 8) -> list[str]:
    """The screen: header, steps, phases, verdict, top layers and functions, processes."""
    total_steps = sum(1 for m in profile.marks if m.name == "step")
    window, _ = recent(profile, steps)
    r = report_of(window)
    shown = min(steps, total_steps)
    out = [
        f"{total_steps} steps in {seconds:.0f} s; last {shown}: {_step_text(r)}",
        f"phases (last {shown} steps): {_phases(r)}",
        f"verdict: {r.verdict.text}",
    ]
    if startup_line(r) and not total_steps:
        out.append(f"startup: {startup_line(r)}")
    if r.layers:
        out += ["", "top layers (self, last steps):"]
        out += [f"  {row.self_percent:5.1f}%  {row.name}" for row in r.layers[:top]]
    if r.functions:
        out += ["", "top functions (self, all threads):"]
        out += [f"  {row.self_percent:5.1f}%  {row.name}" for row in r.functions[:top]]
    if r.processes:
        out += ["", "processes:"] + [f"  {line}" for line in r.processes.lines]
    return out


def live_line(profile: Profile, steps: int, seconds: float) -> str:
    """One line for a log (stdout not a terminal): steps, step time, phases, the top layer."""
    total_steps = sum(1 for m in profile.marks if m.name == "step")
    window, _ = recent(profile, steps)
    r = report_of(window)
    layer = f" | top layer {r.layers[0].name}" if r.layers else ""
    return f"{seconds:6.1f} s | {total_steps} steps, {_step_text(r)} | {_phases(r)}{layer}"


def clip(lines: list[str], width: int, height: int) -> list[str]:
    """``lines`` cut to a terminal of ``width`` x ``height``."""
    return [line[:width] for line in lines[: max(height, 1)]]


def sample_seconds(profile: Profile) -> float:
    if not profile.num_samples:
        return 0.0
    return float(np.max(profile.sample_time) - np.min(profile.sample_time - profile.sample_wall))
