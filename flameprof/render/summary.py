"""The one-screen summary printed on stderr at the end of a run: what was sampled, the top functions
and, when the run trained or ran a model, the phase breakdown, steps and verdict."""

from __future__ import annotations

from .formats import Rendering
from .report import context_lines, idle_note, phase_lines, steps_line

TOP = 8


def format_summary(rendering: Rendering, paths: list[str]) -> str:
    """The summary of ``rendering``'s profile (its analysis is the one the written files used)."""
    profile, mode = rendering.profile, rendering.options.mode
    duration = profile.duration
    rate = profile.meta.get("rate")
    ticks = profile.meta.get("ticks")
    lines = [
        "",
        "flameprof: profile summary",
        f"  duration {duration:.2f} s, {profile.num_samples} samples, {len(profile.threads)} thread(s)"
        + (f", {rate:g} Hz requested" if rate else "")
        + (f", {ticks / duration:.0f} Hz achieved" if ticks and duration else ""),
    ]
    if profile.meta.get("sampler_starved"):
        lines.append(
            f"  warning: the sampler achieved {profile.meta.get('achieved_rate', 0):.0f} Hz, under half the "
            "requested rate: something held the GIL for long stretches (a long C call) or the machine is busy"
        )
    if mode == "gil" and not profile.has_gil_states:
        lines.append(
            "  warning: --mode gil: no sample's GIL state is known (only the C sampler records them)"
        )
    if profile.meta.get("sampler") == "python":
        lines.append(
            "  warning: taken by the pure-Python sampler, which sees a thread only where it lets the GIL go: "
            "Python work between blocking calls (queues, I/O, syncs) is under-counted"
        )
    r = rendering.report
    if r.functions:
        note = f" ({idle_note(r)})" if idle_note(r) else ""
        lines.append(f"  top functions by self {mode} time{note}:")
        for row in r.functions[:TOP]:
            lines.append(f"    {row.self_percent:5.1f}%  {row.self:8.3f} s  {row.name[:100]}")
    if r.deep_learning:
        basis = "steady-state steps" if r.steps.steady.count else "whole run"
        lines.append(
            f"  phases of {r.loop_thread} ({basis}, wall): "
            + ", ".join(
                f"{name} {pct}"
                for name, _, pct, _ in phase_lines(r.basis_phases())
                if not name.startswith(" ")
            )
        )
        lines.append(f"  steps: {steps_line(r.steps)}")
    # around the steps; what the memory limit folded is said of every run
    lines += [f"  {k}: {v}" for k, v in context_lines(r) if r.deep_learning or k == "memory"]
    if r.deep_learning:
        lines.append(f"  verdict: {r.verdict.text}")
        lines += [f"    - {advice}" for advice in r.verdict.advice]
    if r.processes:
        lines += [f"  {line}" for line in r.processes.lines]
    for path in paths:
        lines.append(f"  wrote {path}")
    if r.deep_learning and any(p.endswith(".flameprof") for p in paths):
        profile_path = next(p for p in paths if p.endswith(".flameprof"))
        lines.append(f"  details: flameprof report {profile_path}")
    return "\n".join(lines) + "\n"
