"""The deep-learning report (``analyze/report.py``'s ``Report``) as text, Markdown or JSON.

JSON is ``dataclasses.asdict`` of the report with ``report_version`` first, floats rounded to six
decimals: ``source``, ``duration``, ``unit`` (``s``, or ``samples`` when the weights are sample
counts: imported folded or py-spy text), ``samples``, ``folded``, ``threads``, ``mode``,
``loop_thread``, ``deep_learning``, ``phases`` (all nine, each ``{"seconds", "percent"}``; ``data``
also with ``wait`` and ``fetch``), ``steps``, ``startup``, ``layers``, ``functions``,
``idle_left_out``, ``verdict``, ``processes``, ``ops``, ``memory``, ``device``, ``gil``.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from ..analyze.device_phases import DeviceTimeSection
from ..analyze.report import REPORT_VERSION, Report, Share, Steps
from ..analyze.step_detail import Change, NotableStep, StepDetail
from ..model.phase_names import PHASES
from . import markdown
from .ops_report import format_ops_markdown, format_ops_text

FORMATS = ("text", "markdown", "json")
TOP = 10


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def report_json(report: Report) -> dict:
    """The report as JSON-ready data: its fields, floats rounded, ``report_version`` first."""
    return {"report_version": REPORT_VERSION, **_rounded(asdict(report))}  # type: ignore[dict-item]


def format_json(report: Report) -> str:
    return json.dumps(report_json(report), indent=2) + "\n"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def _amount(value: float, unit: str) -> str:
    """Seconds, or a number of samples when the weights are counts (imported folded or py-spy text)."""
    return f"{value:.3f} s" if unit == "s" else f"{value:g} samples"


def _duration(r: Report) -> str:
    if r.unit == "s":
        return f"duration {r.duration:.2f} s, {r.samples} samples"
    return f"{r.samples} stacks weighted by sample counts (no times)"


def phase_lines(
    phases: dict[str, Share], steady: dict[str, Share] | None = None, unit: str = "s"
) -> list[tuple[str, str, str, str]]:
    """(name, amount, percent, steady percent) rows, data's parts indented under it."""
    rows = []
    for phase in PHASES:
        cell = phases[phase]
        entries: list[tuple[str, Share, Share | None]] = [(phase, cell, (steady or {}).get(phase))]
        if phase == "data":
            st = (steady or {}).get("data")
            entries += [
                (f"  data.{k}", getattr(cell, k), getattr(st, k) if st else None) for k in ("wait", "fetch")
            ]
        for name, c, st in entries:
            rows.append(
                (name, _amount(c.seconds, unit), f"{c.percent:.1f}%", f"{st.percent:.1f}%" if st else "")
            )
    return rows


def steps_line(steps: Steps) -> str:
    if not steps.count:
        return "no steps found (mark them with flameprof.step())"
    st = steps.steady
    text = f"{steps.count} steps ({steps.source})"
    if steps.source == "samples":
        text = (
            f"about {steps.count} steps, estimated from the samples (no optimizer step, backward, "
            "module call or flameprof.step() marked them): step times are estimates"
        )
    if steps.micro_steps:
        text += f", {steps.micro_steps} micro-steps (backward passes)"
    if steps.folded:
        text += f", {steps.folded} of them folded (statistics of the last {len(steps.per_step)})"
    if steps.warmup.count:
        text += f", warm-up {steps.warmup.count} ({steps.warmup.seconds:.2f} s)"
    if st.p50 is not None and st.p90 is not None and st.max is not None:
        text += f"; steady p50 {_ms(st.p50)}, p90 {_ms(st.p90)}, max {_ms(st.max)}"
    return text


def apart_line(r: Report) -> str:
    """Evaluation and checkpointing of a run, which its steps leave out, or ""."""
    cells = [
        (label, r.phases[phase]) for phase, label in (("eval", "evaluation"), ("checkpoint", "checkpointing"))
    ]
    parts = [
        f"{label} {c.seconds:.2f} s ({c.percent:.1f}% of the run)" for label, c in cells if c.seconds > 0
    ]
    return ", ".join(parts) + ", not in the steps" if parts else ""


def startup_line(r: Report) -> str:
    """``startup 2.10 s before the first step, of which imports 1.80 s`` (loop thread), or ""."""
    startup, unit = r.startup, r.unit
    later = startup.imports_whole_run - startup.imports
    parts = []
    if r.steps.count:
        parts.append(
            f"{_amount(startup.seconds, unit)} before the first step, "
            f"of which imports {_amount(startup.imports, unit)}"
        )
    if later >= 0.01:
        parts.append(f"imports after it {_amount(later, unit)}")
    return "; ".join(parts)


def device_time_line(d: DeviceTimeSection) -> str:
    """The device's time per steady-state step, in one line (``device:`` in the summary and report)."""
    clock = "CUDA events" if d.clock == "cuda" else f"{d.clock or 'unknown'} clock"
    work = ", ".join(
        f"{name} {_ms(d.device[name])}" for name in ("forward", "backward", "optimizer", "other")
    )
    return (
        f"{_ms(d.step_seconds)} a step on average ({clock}, {d.steps} steady steps): {work}; "
        f"idle while the host waits for data {_ms(d.device['data.wait'])} ({d.data_wait_percent:.1f}%); "
        f"{_ms(d.lag_seconds)} behind the host at the step's end"
    )


def context_lines(r: Report) -> list[tuple[str, str]]:
    """(label, text) of the lines around the steps that a run has: evaluation and checkpointing apart
    from the steps, startup, what the memory limit folded, the device's time per step."""
    lines = [
        ("apart", apart_line(r)),
        ("startup", startup_line(r)),
        ("memory", r.folded),
        ("device", device_time_line(r.device_time) if r.device_time else ""),
    ]
    return [(label, text) for label, text in lines if text]


def idle_note(r: Report) -> str:
    """``3.200 s of other threads' idle waits left out (--idle)`` when some were, else ""."""
    if r.idle_left_out <= 0:
        return ""
    return f"{_amount(r.idle_left_out, r.unit)} of other threads' idle waits left out (--idle)"


def step_phase_text(ph: dict[str, float]) -> str:
    """``data 80% forward 12% ...`` of one step's phases (only those it spent time in)."""
    total = sum(ph.values()) or 1.0
    merged = {"data": ph["data.wait"] + ph["data.fetch"], **{p: ph[p] for p in PHASES if p != "data"}}
    return " ".join(f"{p} {100 * v / total:.0f}%" for p, v in merged.items() if v > 0)


def grew_text(step: NotableStep) -> str:
    """What made a notable step slower than the average: ``data.wait +20.1 ms, Net.fc (Linear) +3.2 ms``."""
    parts = [f"{c.name} +{_ms(c.step - c.average)}" for c in (step.grew_phase, step.grew_layer) if c]
    return f"grew: {', '.join(parts)}" if parts else ""


def _notable_lines(steps: Steps) -> list[tuple[str, str, str, str, str]]:
    """(index, kind, wall, phases, what grew) of each notable step."""
    return [
        (str(n.index), n.kind, _ms(n.wall), step_phase_text(n.phases), grew_text(n)) for n in steps.notable
    ]


def _change_rows(changes: list[Change], unit: str) -> list[tuple[str, str, str, str]]:
    """(name, this step, average, difference) cells of a step's phases, layers or ops."""
    return [
        (c.name, _ms(c.step), _ms(c.average), f"{1000 * (c.step - c.average):+.1f} ms")
        if unit == "s"
        else (c.name, _amount(c.step, unit), _amount(c.average, unit), f"{c.step - c.average:+g}")
        for c in changes
        if c.step > 0 or c.average > 0
    ]


def _step_tables(d: StepDetail, unit: str) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    tables = [("phase", _change_rows(d.phases, unit)), ("layer", _change_rows(d.layers, unit))]
    if d.ops is not None:
        tables.append(("op (traced window)", _change_rows(d.ops, unit)))
    return tables


def step_heading(d: StepDetail) -> str:
    kind = "warm-up step" if d.warmup else "step"
    return f"{kind} {d.index}: {_ms(d.wall)}, steady-state average {_ms(d.average_wall)}"


GIL_UNKNOWN_TEXT = "unknown: only the C sampler records which thread held the GIL"
GIL_COLUMNS = ("thread", "samples", "held", "waiting", "without", "other")


def gil_heading(r: Report) -> str:
    """What the GIL table shows, and what it leaves out."""
    left_out = r.gil.unknown_samples if r.gil else 0
    note = f"; {left_out} samples of unknown state left out" if left_out else ""
    return (
        "GIL: each thread's time holding it, waiting for it, running C code without it, and the rest "
        f"(blocked or idle){note}"
    )


def gil_rows(r: Report, top: int = TOP) -> list[tuple[str, str, str, str, str, str]]:
    """(thread, samples, held %, waiting %, without %, other %) of the threads that held the GIL or
    waited for it most."""
    rows = []
    for g in r.gil.threads[:top] if r.gil else []:
        held, waiting, without, other = (f"{v:.1f}%" for v in (g.held, g.waiting, g.without, g.other))
        rows.append((g.thread, str(g.samples), held, waiting, without, other))
    return rows


def _steady(r: Report) -> dict[str, Share] | None:
    return r.steps.steady.phases if r.steps.count else None


def format_text(r: Report, top: int = TOP) -> str:
    out = [
        f"flameprof report{': ' + r.source if r.source else ''}",
        f"  {_duration(r)}, {r.threads} thread(s), loop thread {r.loop_thread or '-'}",
        f"  steps: {steps_line(r.steps)}",
    ]
    out += [f"  {label}: {text}" for label, text in context_lines(r)]
    out += ["", "phases (loop thread wall time)            run     steady steps"]
    for name, secs, pct, st in phase_lines(r.phases, _steady(r), r.unit):
        out.append(f"  {name:<14} {secs:>12} {pct:>8} {st:>10}")
    notable = _notable_lines(r.steps)
    if notable:
        out += ["", "notable steps:"]
        out += [
            f"  #{i:<5} {kind:<8} {wall:>10}  {phases}  {grew}".rstrip()
            for i, kind, wall, phases, grew in notable
        ]
    if r.step:
        out += ["", step_heading(r.step)]
        for what, rows in _step_tables(r.step, r.unit):
            out.append(f"  {what:<44} {'this step':>12} {'average':>12} {'change':>10}")
            out += [f"    {name[:42]:<42} {a:>12} {b:>12} {c:>10}" for name, a, b, c in rows]
    out += ["", f"verdict: {r.verdict.text}"]
    if r.verdict.device:
        out.append(f"  on the device (traced window): {r.verdict.device.text}")
    out += [f"  - {a}" for a in r.verdict.advice]
    if r.graph_advice:
        out += ["", "graph advice (what to change in the model, and what it would save):"]
        out += [f"  - {a.text}" for a in r.graph_advice]
    if r.processes:
        out += ["", "processes:"] + [f"  {line}" for line in r.processes.lines]
    if r.gil is None:
        out += ["", f"GIL: {GIL_UNKNOWN_TEXT}"]
    else:
        out += [
            "",
            gil_heading(r) + ":",
            f"  {GIL_COLUMNS[0]:<40} " + " ".join(f"{c:>8}" for c in GIL_COLUMNS[1:]),
        ]
        out += [f"  {row[0][:40]:<40} " + " ".join(f"{c:>8}" for c in row[1:]) for row in gil_rows(r, top)]
    if r.layers:
        for key in ("self", "total"):
            out += ["", f"top layers by {key} time:"]
            for row in sorted(r.layers, key=lambda x: -getattr(x, key))[:top]:
                amount = _amount(getattr(row, key), r.unit)
                out.append(f"  {getattr(row, key + '_percent'):5.1f}%  {amount:>10}  {row.name}")
    if r.functions:
        note = f"; {idle_note(r)}" if idle_note(r) else ""
        out += ["", f"top functions by self {r.mode} time (all threads{note}):"]
        for f in r.functions[:top]:
            out.append(
                f"  {f.self_percent:5.1f}%  {_amount(f.self, r.unit):>10}  "
                f"total {f.total_percent:5.1f}%  {f.name}"
            )
    out += format_ops_text(r, top)
    return "\n".join(out) + "\n"


def format_markdown(r: Report, top: int = TOP) -> str:
    out = [
        f"# flameprof report{': ' + markdown.text(r.source) if r.source else ''}",
        "",
        f"- {_duration(r)}, {r.threads} thread(s)",
        f"- loop thread: {markdown.text(r.loop_thread or '-')}",
        f"- steps: {steps_line(r.steps)}",
        *(f"- {label}: {text}" for label, text in context_lines(r)),
        "",
        f"**Verdict: {markdown.text(r.verdict.text)}**",
        "",
    ]
    if r.verdict.device:
        out += [f"On the device (traced window): {markdown.text(r.verdict.device.text)}", ""]
    out += [f"- {markdown.text(a)}" for a in r.verdict.advice]
    if r.graph_advice:
        out += ["", "## Graph advice", ""] + [f"- {markdown.text(a.text)}" for a in r.graph_advice]
    if r.processes:
        out += ["", "## Processes", ""] + [f"- {markdown.text(line)}" for line in r.processes.lines]
    out += ["", "## GIL", ""]
    if r.gil is None:
        out.append(f"GIL {markdown.text(GIL_UNKNOWN_TEXT)}.")
    else:
        out += [
            f"{markdown.text(gil_heading(r))}.",
            "",
            "| " + " | ".join(GIL_COLUMNS) + " |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        out += [f"| {markdown.code(row[0])} | {' | '.join(row[1:])} |" for row in gil_rows(r, top)]
    out += [
        "",
        "## Phases",
        "",
        "| phase | time | % of run | % of steady steps |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, secs, pct, st in phase_lines(r.phases, _steady(r), r.unit):
        out.append(f"| {name.strip()} | {secs} | {pct} | {st} |")
    notable = _notable_lines(r.steps)
    if notable:
        out += [
            "",
            "## Notable steps",
            "",
            "| step | kind | wall | phases | what grew |",
            "| ---: | --- | ---: | --- | --- |",
        ]
        out += [f"| {' | '.join(markdown.text(cell) for cell in row)} |" for row in notable]
    if r.step:
        out += ["", f"## {markdown.text(step_heading(r.step)).capitalize()}"]
        for what, rows in _step_tables(r.step, r.unit):
            out += ["", f"| {what} | this step | average | change |", "| --- | ---: | ---: | ---: |"]
            out += [f"| {markdown.code(name)} | {a} | {b} | {c} |" for name, a, b, c in rows]
    if r.layers:
        out += [
            "",
            "## Top layers",
            "",
            "| layer | self | self % | total | total % |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for row in r.layers[:top]:
            out.append(
                f"| {markdown.code(row.name)} | {_amount(row.self, r.unit)} | {row.self_percent:.1f}% | "
                f"{_amount(row.total, r.unit)} | {row.total_percent:.1f}% |"
            )
    if r.functions:
        out += [
            "",
            "## Top functions",
            "",
            "| function | self | self % | total % |",
            "| --- | ---: | ---: | ---: |",
        ]
        for f in r.functions[:top]:
            out.append(
                f"| {markdown.code(f.name)} | {_amount(f.self, r.unit)} | {f.self_percent:.1f}% | "
                f"{f.total_percent:.1f}% |"
            )
        if idle_note(r):
            out += ["", f"*{markdown.text(idle_note(r))}*"]
    out += format_ops_markdown(r, top)
    return "\n".join(out) + "\n"


def render_report(report: Report, fmt: str) -> str:
    """``report`` in ``fmt``: text, markdown or json."""
    if fmt == "json":
        return format_json(report)
    if fmt == "markdown":
        return format_markdown(report)
    if fmt == "text":
        return format_text(report)
    raise ValueError(f"unknown report format {fmt!r} (expected one of {', '.join(FORMATS)})")
