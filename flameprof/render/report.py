"""The deep-learning report: one dictionary with stable keys, rendered as JSON, text or markdown.

JSON keys (version 1): ``report_version``, ``source``, ``duration``, ``unit`` (``s``, or ``samples``
when the weights are sample counts: imported folded or py-spy text), ``samples``, ``folded`` (what
the memory budget folded, or ""), ``threads``, ``loop_thread``, ``phases`` (all nine: ``data``
with ``wait`` and ``fetch``, ``forward``, ``backward``, ``optimizer``, ``sync``, ``comm``,
``eval``, ``checkpoint``, ``other``; each ``{"seconds", "percent"}``), ``steps`` (``count``
includes ``folded`` steps; ``micro_steps``: backward passes, when more than the steps),
``startup`` (loop thread seconds before the first step, ``imports`` among them, and
``imports_whole_run``), ``layers``, ``functions`` (the idle waits of threads other than the
loop's left out unless asked for: ``idle_left_out`` says how much), ``verdict``. Percentages are of the loop
thread's wall time (for ``phases``) or of the steady-state steps (for ``steps.steady.phases``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..analyze.advice import HIGHLY, MODERATELY, basis_seconds, judge
from ..analyze.breakdown import Analysis, Row, analyze
from ..analyze.phases import Rule
from ..analyze.processes import processes_report
from ..model.phase_names import LEAF_PHASES, PHASES
from ..model.profile import Profile
from . import markdown
from .ops_report import add_layer_costs, format_ops_markdown, format_ops_text, ops_sections

FORMATS = ("text", "markdown", "json")
REPORT_VERSION = 1
TOP = 10


def _r(x: float) -> float:
    return round(float(x), 6)


def phase_table(seconds: np.ndarray) -> dict:
    """``{phase: {"seconds", "percent"}}`` for every phase; ``data`` also has ``wait`` and ``fetch``."""
    total = float(seconds.sum())

    def cell(s: float) -> dict:
        return {"seconds": _r(s), "percent": _r(100.0 * s / total if total else 0.0)}

    by_leaf = {p: float(seconds[i]) for i, p in enumerate(LEAF_PHASES)}
    table = {}
    for phase in PHASES:
        if phase == "data":
            table["data"] = cell(by_leaf["data.wait"] + by_leaf["data.fetch"])
            table["data"]["wait"] = cell(by_leaf["data.wait"])
            table["data"]["fetch"] = cell(by_leaf["data.fetch"])
        else:
            table[phase] = cell(by_leaf[phase])
    return table


def _rows(rows: Sequence[Row], total: float) -> list[dict]:
    pct = (lambda s: _r(100.0 * s / total)) if total else (lambda s: 0.0)
    return [
        {
            "name": r.name,
            "self": _r(r.self_s),
            "total": _r(r.total_s),
            "self_percent": pct(r.self_s),
            "total_percent": pct(r.total_s),
        }
        for r in rows
    ]


def _steps(analysis: Analysis) -> dict:
    steps = analysis.steps
    walls = steps.walls
    steady = walls[steps.steady] if steps.count else walls
    stats: dict[str, Any] = {"count": int(len(steady))}
    if len(steady):
        stats |= {
            "p50": _r(np.percentile(steady, 50)),
            "p90": _r(np.percentile(steady, 90)),
            "max": _r(steady.max()),
            "mean": _r(steady.mean()),
        }
    stats["phases"] = phase_table(steps.steady_phase_seconds())
    return {
        "source": steps.source,
        "count": steps.count + steps.folded,
        "folded": steps.folded,  # steps before ``per_step``'s, counted but folded to bound memory
        "micro_steps": steps.micro_steps,  # backward passes, when more than the steps (accumulation)
        "warmup": {"count": steps.warmup, "seconds": _r(walls[: steps.warmup].sum())},
        "steady": stats,
        "per_step": [
            {"start": start, "wall": wall, "warmup": i < steps.warmup, "phases": dict(zip(LEAF_PHASES, row))}
            for i, (start, wall, row) in enumerate(
                zip(
                    np.round(steps.bounds[:-1], 6).tolist(),
                    np.round(walls, 6).tolist(),
                    np.round(steps.phase_seconds, 6).tolist(),
                )
            )
        ],
    }


def report_data(
    profile: Profile,
    rules: Sequence[Rule] = (),
    mode: str = "wall",
    source: str = "",
    analysis: Analysis | None = None,
    idle: bool = False,
) -> dict:
    """The report as a JSON-ready dictionary (``idle``: top functions include other threads' idle waits)."""
    analysis = analysis or analyze(profile, rules, mode, TOP, idle)
    verdict = judge(analysis)
    _, basis = basis_seconds(analysis)
    traced = ops_sections(profile)
    layers = _rows(analysis.layers, analysis.loop_seconds)
    add_layer_costs(layers, traced["ops"])
    return {
        "report_version": REPORT_VERSION,
        "source": source,
        "duration": _r(profile.duration),
        "unit": "samples" if profile.meta.get("weight_unit", "seconds") == "count" else "s",
        "samples": profile.num_samples,
        "folded": folded_line(profile.meta),
        "threads": len(profile.threads),
        "mode": mode,
        "loop_thread": analysis.thread_name,
        "deep_learning": analysis.is_deep_learning,
        "phases": phase_table(analysis.phase_seconds),
        "steps": _steps(analysis),
        "startup": {
            "seconds": _r(analysis.startup_seconds),
            "imports": _r(analysis.startup_import_seconds),
            "imports_whole_run": _r(analysis.import_seconds),
        },
        "layers": layers,
        "functions": _rows(analysis.functions, analysis.function_total),
        "idle_left_out": _r(analysis.idle_left_out),
        "verdict": {
            "level": verdict.level,
            "input_bound": verdict.level in ("highly", "moderately"),
            "data_percent": _r(100 * verdict.data_share),
            "basis": verdict.basis,
            "text": verdict.text,
            "thresholds": {"highly": 100 * HIGHLY, "moderately": 100 * MODERATELY},
            "advice": verdict.advice,
            "device": _device_verdict(traced["device"]),
        },
        "processes": processes_report(profile, rules),
        **traced,
    }


def _device_verdict(device: dict) -> dict | None:
    """The traced window's verdict on the device (analyze/ops.py), None without a device."""
    idle = device.get("idle") if device else None
    return {"level": idle["level"], "text": idle["verdict"]} if idle else None


def format_json(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def _amount(value: float, unit: str) -> str:
    """Seconds, or a number of samples when the weights are counts (imported folded or py-spy text)."""
    return f"{value:.3f} s" if unit == "s" else f"{value:g} samples"


def _duration(data: dict) -> str:
    if data["unit"] == "s":
        return f"duration {data['duration']:.2f} s, {data['samples']} samples"
    return f"{data['samples']} stacks weighted by sample counts (no times)"


def phase_lines(phases: dict, steady: dict | None = None, unit: str = "s") -> list[tuple[str, str, str, str]]:
    """(name, amount, percent, steady percent) rows, data's parts indented under it."""
    rows = []
    for phase in PHASES:
        entries = [(phase, phases[phase], (steady or {}).get(phase))]
        if phase == "data":
            entries += [
                (f"  data.{k}", phases["data"][k], (steady or {}).get("data", {}).get(k))
                for k in ("wait", "fetch")
            ]
        for name, cell, st in entries:
            rows.append(
                (
                    name,
                    _amount(cell["seconds"], unit),
                    f"{cell['percent']:.1f}%",
                    f"{st['percent']:.1f}%" if st else "",
                )
            )
    return rows


def steps_line(steps: dict) -> str:
    if not steps["count"]:
        return "no steps found (mark them with flameprof.step())"
    st = steps["steady"]
    text = f"{steps['count']} steps ({steps['source']})"
    if steps["source"] == "samples":
        text = (
            f"about {steps['count']} steps, estimated from the samples (no optimizer step, backward, "
            "module call or flameprof.step() marked them): step times are estimates"
        )
    if steps.get("micro_steps"):
        text += f", {steps['micro_steps']} micro-steps (backward passes)"
    if steps.get("folded"):
        text += f", {steps['folded']} of them folded (statistics of the last {len(steps['per_step'])})"
    if steps["warmup"]["count"]:
        text += f", warm-up {steps['warmup']['count']} ({steps['warmup']['seconds']:.2f} s)"
    if st["count"]:
        text += f"; steady p50 {_ms(st['p50'])}, p90 {_ms(st['p90'])}, max {_ms(st['max'])}"
    return text


def apart_line(data: dict) -> str:
    """Evaluation and checkpointing of a run, which its steps leave out, or ""."""
    cells = [
        (label, data["phases"][phase])
        for phase, label in (("eval", "evaluation"), ("checkpoint", "checkpointing"))
    ]
    parts = [
        f"{label} {c['seconds']:.2f} s ({c['percent']:.1f}% of the run)"
        for label, c in cells
        if c["seconds"] > 0
    ]
    return ", ".join(parts) + ", not in the steps" if parts else ""


def startup_line(data: dict) -> str:
    """``startup 2.10 s before the first step, of which imports 1.80 s`` (loop thread), or ""."""
    startup, unit = data["startup"], data["unit"]
    later = startup["imports_whole_run"] - startup["imports"]
    parts = []
    if data["steps"]["count"]:
        parts.append(
            f"{_amount(startup['seconds'], unit)} before the first step, "
            f"of which imports {_amount(startup['imports'], unit)}"
        )
    if later >= 0.01:
        parts.append(f"imports after it {_amount(later, unit)}")
    return "; ".join(parts)


def folded_line(meta: dict) -> str:
    """What a profile folded to stay within its memory budget (``--max-memory``), or ""."""
    folded = meta.get("folded")
    if not isinstance(folded, dict) or not folded.get("samples"):
        return ""
    return (
        f"{folded['samples']:,} samples before {folded['until']:.0f} s folded into {folded['window']:g} s "
        "windows (totals, phases and layers exact; timeline coarser; --max-memory)"
    )


def idle_note(data: dict) -> str:
    """``3.200 s of other threads' idle waits left out (--idle)`` when some were, else ""."""
    left_out = data.get("idle_left_out", 0.0)
    if left_out <= 0:
        return ""
    return f"{_amount(left_out, data['unit'])} of other threads' idle waits left out (--idle)"


def notable_steps(steps: dict, slowest: int = 3) -> list[tuple[str, int, dict]]:
    """(kind, 1-based index, step) for the warm-up steps and the slowest steady-state steps."""
    per = steps["per_step"]
    out = [("warm-up", i + 1, st) for i, st in enumerate(per) if st["warmup"]]
    steady = sorted((i for i, st in enumerate(per) if not st["warmup"]), key=lambda i: -per[i]["wall"])
    return out + [("slowest", i + 1, per[i]) for i in sorted(steady[:slowest])]


def step_phase_text(step: dict) -> str:
    """``data 80% forward 12% ...`` of one step's phases (only those it spent time in)."""
    ph = step["phases"]
    total = sum(ph.values()) or 1.0
    merged = {"data": ph["data.wait"] + ph["data.fetch"], **{p: ph[p] for p in PHASES if p != "data"}}
    return " ".join(f"{p} {100 * v / total:.0f}%" for p, v in merged.items() if v > 0)


def format_text(data: dict, top: int = TOP) -> str:
    out = [
        f"flameprof report{': ' + data['source'] if data['source'] else ''}",
        f"  {_duration(data)}, {data['threads']} thread(s), loop thread {data['loop_thread'] or '-'}",
        f"  steps: {steps_line(data['steps'])}",
    ]
    if apart_line(data):
        out.append(f"  apart: {apart_line(data)}")
    if startup_line(data):
        out.append(f"  startup: {startup_line(data)}")
    if data["folded"]:
        out.append(f"  memory: {data['folded']}")
    out += [
        "",
        "phases (loop thread wall time)            run     steady steps",
    ]
    steady = data["steps"]["steady"]["phases"] if data["steps"]["count"] else None
    unit = data["unit"]
    for name, secs, pct, st in phase_lines(data["phases"], steady, unit):
        out.append(f"  {name:<14} {secs:>12} {pct:>8} {st:>10}")
    notable = notable_steps(data["steps"])
    if notable:
        out += ["", "notable steps:"]
        out += [
            f"  #{i:<5} {kind:<8} {_ms(st['wall']):>10}  {step_phase_text(st)}" for kind, i, st in notable
        ]
    out += ["", f"verdict: {data['verdict']['text']}"]
    if data["verdict"]["device"]:
        out.append(f"  on the device (traced window): {data['verdict']['device']['text']}")
    out += [f"  - {a}" for a in data["verdict"]["advice"]]
    if data["processes"]:
        out += ["", "processes:"] + [f"  {line}" for line in data["processes"]["lines"]]
    layers = data["layers"]
    if layers:
        for key in ("self", "total"):
            out += ["", f"top layers by {key} time:"]
            for row in sorted(layers, key=lambda r: -r[key])[:top]:
                out.append(f"  {row[key + '_percent']:5.1f}%  {_amount(row[key], unit):>10}  {row['name']}")
    if data["functions"]:
        note = f"; {idle_note(data)}" if idle_note(data) else ""
        out += ["", f"top functions by self {data['mode']} time (all threads{note}):"]
        for row in data["functions"][:top]:
            out.append(
                f"  {row['self_percent']:5.1f}%  {_amount(row['self'], unit):>10}  total "
                f"{row['total_percent']:5.1f}%  "
                f"{row['name']}"
            )
    out += format_ops_text(data, top)
    return "\n".join(out) + "\n"


def format_markdown(data: dict, top: int = TOP) -> str:
    out = [
        f"# flameprof report{': ' + markdown.text(data['source']) if data['source'] else ''}",
        "",
        f"- {_duration(data)}, {data['threads']} thread(s)",
        f"- loop thread: {markdown.text(data['loop_thread'] or '-')}",
        f"- steps: {steps_line(data['steps'])}",
        *([f"- apart: {apart_line(data)}"] if apart_line(data) else []),
        *([f"- startup: {startup_line(data)}"] if startup_line(data) else []),
        *([f"- memory: {data['folded']}"] if data["folded"] else []),
        "",
        f"**Verdict: {markdown.text(data['verdict']['text'])}**",
        "",
    ]
    if data["verdict"]["device"]:
        out += [f"On the device (traced window): {markdown.text(data['verdict']['device']['text'])}", ""]
    out += [f"- {markdown.text(a)}" for a in data["verdict"]["advice"]]
    if data["processes"]:
        out += ["", "## Processes", ""] + [f"- {markdown.text(line)}" for line in data["processes"]["lines"]]
    out += [
        "",
        "## Phases",
        "",
        "| phase | time | % of run | % of steady steps |",
        "| --- | ---: | ---: | ---: |",
    ]
    steady = data["steps"]["steady"]["phases"] if data["steps"]["count"] else None
    unit = data["unit"]
    for name, secs, pct, st in phase_lines(data["phases"], steady, unit):
        out.append(f"| {name.strip()} | {secs} | {pct} | {st} |")
    notable = notable_steps(data["steps"])
    if notable:
        out += ["", "## Notable steps", "", "| step | kind | wall | phases |", "| ---: | --- | ---: | --- |"]
        out += [f"| {i} | {kind} | {_ms(st['wall'])} | {step_phase_text(st)} |" for kind, i, st in notable]
    if data["layers"]:
        out += [
            "",
            "## Top layers",
            "",
            "| layer | self | self % | total | total % |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for row in data["layers"][:top]:
            out.append(
                f"| {markdown.code(row['name'])} | {_amount(row['self'], unit)} | "
                f"{row['self_percent']:.1f}% | {_amount(row['total'], unit)} | {row['total_percent']:.1f}% |"
            )
    if data["functions"]:
        out += [
            "",
            "## Top functions",
            "",
            "| function | self | self % | total % |",
            "| --- | ---: | ---: | ---: |",
        ]
        for row in data["functions"][:top]:
            out.append(
                f"| {markdown.code(row['name'])} | {_amount(row['self'], unit)} | "
                f"{row['self_percent']:.1f}% | {row['total_percent']:.1f}% |"
            )
        if idle_note(data):
            out += ["", f"*{markdown.text(idle_note(data))}*"]
    out += format_ops_markdown(data, top)
    return "\n".join(out) + "\n"


def render_report(data: dict, fmt: str) -> str:
    """``data`` (from ``report_data``) in ``fmt``: text, markdown or json."""
    if fmt == "json":
        return format_json(data)
    if fmt == "markdown":
        return format_markdown(data)
    if fmt == "text":
        return format_text(data)
    raise ValueError(f"unknown report format {fmt!r} (expected one of {', '.join(FORMATS)})")
