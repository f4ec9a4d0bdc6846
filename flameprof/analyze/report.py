"""The deep-learning report as typed data, computed once per profile: every renderer (text, Markdown,
JSON, HTML, the summary, the live view, the integrations) formats a ``Report`` and computes nothing.

Times are seconds (or sample counts when ``unit`` is ``samples``: imported folded or py-spy text);
percentages are of the loop thread's wall time (``phases``) or of the steady-state steps
(``steps.steady.phases``). ``render/report_json.py`` writes it with ``dataclasses.asdict``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..model.phase_names import LEAF_PHASES, PHASES
from ..model.profile import Profile
from .advice import HIGHLY, MODERATELY, judge, judge_on_device
from .breakdown import Analysis, Row, analyze
from .device_phases import DeviceTimeSection, device_time
from .gil import GilSection, gil_section
from .graph_advice import GraphAdvice, graph_advice
from .memory_flow import MemoryFlow, memory_flow
from .ops import DeviceSection, LayerCost, MemorySection, OpsSection, ops_report
from .phases import Rule
from .precision_advice import precision_advice
from .processes import ProcessesSection, analyze_processes, processes_section
from .step_detail import NotableStep, StepDetail, StepLayers, notable_steps, step_detail

# Version 2: version 1's keys and ``device_time``; what a profile lacks is null (``ops``, ``memory``
# and ``device`` without a traced window, ``device_time`` without device stamps, ``steps.steady``'s
# statistics without steady steps), not absent or ``{}``. Version 3: version 2's and ``gil`` (null
# when no sample's GIL state is known).
REPORT_VERSION = 3
TOP = 10  # functions ranked


@dataclass(frozen=True)
class Share:
    seconds: float
    percent: float


@dataclass(frozen=True)
class DataShare(Share):
    """The ``data`` phase: waiting for batches, and fetching them in the loop's own thread."""

    wait: Share
    fetch: Share


@dataclass(frozen=True)
class StepRow:
    start: float
    wall: float
    warmup: bool
    phases: dict[str, float]  # seconds per leaf phase


@dataclass(frozen=True)
class SteadySteps:
    count: int
    p50: float | None
    p90: float | None
    max: float | None
    mean: float | None
    phases: dict[str, Share]


@dataclass(frozen=True)
class Warmup:
    count: int
    seconds: float


@dataclass(frozen=True)
class Steps:
    source: str  # what marked them: ``marks:step``, ``samples``, ...
    count: int  # including ``folded`` steps
    folded: int  # steps before ``per_step``'s, counted but folded to bound memory
    micro_steps: int  # backward passes, when more than the steps (gradient accumulation)
    warmup: Warmup
    steady: SteadySteps
    per_step: list[StepRow]
    notable: list[NotableStep]  # the warm-up steps and the slowest, with what grew in them


@dataclass(frozen=True)
class Startup:
    seconds: float  # loop thread, before the first step
    imports: float  # of which in the import system
    imports_whole_run: float


@dataclass(frozen=True)
class FunctionRow:
    name: str
    self: float
    total: float
    self_percent: float
    total_percent: float


@dataclass(frozen=True)
class LayerRow(FunctionRow):
    """A sampled layer, with the traced window's costs of it (None where the window did not see it)."""

    params: int | None = None
    param_bytes: int | None = None
    flops: float | None = None
    forward_flops: float | None = None
    forward: float | None = None
    backward: float | None = None
    device: float | None = None
    gflops_per_s: float | None = None


@dataclass(frozen=True)
class DeviceVerdict:
    level: str
    text: str


@dataclass(frozen=True)
class VerdictSection:
    level: str  # highly, moderately, not or unknown
    input_bound: bool
    data_percent: float
    basis: str  # steady-state steps, whole run, or device time (a GPU run's device stamps)
    text: str
    thresholds: dict[str, float]
    advice: list[str]
    device: DeviceVerdict | None  # the traced window's verdict on the device


@dataclass(frozen=True)
class Report:
    source: str
    duration: float
    unit: str  # ``s``, or ``samples`` when the weights are sample counts
    samples: int
    folded: str  # what the memory limit folded, in words, or ""
    threads: int
    mode: str
    loop_thread: str
    deep_learning: bool
    phases: dict[str, Share]
    steps: Steps
    startup: Startup
    layers: list[LayerRow]
    functions: list[FunctionRow]
    idle_left_out: float  # other threads' idle waits left out of ``functions``
    verdict: VerdictSection
    processes: ProcessesSection | None
    ops: OpsSection | None
    memory: MemorySection | None
    device: DeviceSection | None
    device_time: DeviceTimeSection | None  # the device's time per phase over the whole run
    step: StepDetail | None  # one step beside the average (``report --step N``)
    graph_advice: list[GraphAdvice]  # what to change in the model's graph, and what it would save
    memory_flow: MemoryFlow | None  # the traced window's memory over time, by allocating layer
    gil: GilSection | None  # each thread's time holding the GIL, waiting for it, ... (C sampler only)

    def basis_phases(self) -> dict[str, Share]:
        """The steady-state steps' phases when there are steady steps, else the whole run's."""
        return self.steps.steady.phases if self.steps.steady.count else self.phases


def phase_shares(seconds: np.ndarray) -> dict[str, Share]:
    """Every phase's seconds and share of ``seconds`` (per leaf phase); ``data`` with its parts."""
    total = float(seconds.sum())
    by_leaf = {p: float(seconds[i]) for i, p in enumerate(LEAF_PHASES)}

    def share(s: float) -> Share:
        return Share(s, 100.0 * s / total if total else 0.0)

    table: dict[str, Share] = {}
    for phase in PHASES:
        if phase == "data":
            wait, fetch = by_leaf["data.wait"], by_leaf["data.fetch"]
            table["data"] = DataShare(wait + fetch, share(wait + fetch).percent, share(wait), share(fetch))
        else:
            table[phase] = share(by_leaf[phase])
    return table


def _rows(rows: Sequence[Row], total: float) -> list[FunctionRow]:
    def pct(s: float) -> float:
        return 100.0 * s / total if total else 0.0

    return [FunctionRow(r.name, r.self_s, r.total_s, pct(r.self_s), pct(r.total_s)) for r in rows]


def _layer_rows(rows: Sequence[Row], total: float, ops: OpsSection | None) -> list[LayerRow]:
    traced: dict[str, LayerCost] = {c.name: c for c in ops.layers} if ops else {}
    out = []
    for r in _rows(rows, total):
        cost = traced.get(r.name)
        costs = (
            (cost.params, cost.param_bytes, cost.flops, cost.forward_flops, cost.forward, cost.backward,
             cost.device, cost.gflops_per_s)
            if cost else ()
        )  # fmt: skip
        out.append(LayerRow(r.name, r.self, r.total, r.self_percent, r.total_percent, *costs))
    return out


def _steps(analysis: Analysis, layers: StepLayers) -> Steps:
    steps = analysis.steps
    walls = steps.walls
    steady = walls[steps.steady] if steps.count else walls
    steady_stats = SteadySteps(
        int(len(steady)), None, None, None, None, phase_shares(steps.steady_phase_seconds())
    )
    if len(steady):
        steady_stats = dataclasses.replace(
            steady_stats,
            p50=float(np.percentile(steady, 50)),
            p90=float(np.percentile(steady, 90)),
            max=float(steady.max()),
            mean=float(steady.mean()),
        )
    per_step = [
        StepRow(start, wall, i < steps.warmup, dict(zip(LEAF_PHASES, row)))
        for i, (start, wall, row) in enumerate(
            zip(steps.bounds[:-1].tolist(), walls.tolist(), steps.phase_seconds.tolist())
        )
    ]
    return Steps(
        steps.source,
        steps.count + steps.folded,
        steps.folded,
        steps.micro_steps,
        Warmup(steps.warmup, float(walls[: steps.warmup].sum())),
        steady_stats,
        per_step,
        notable_steps(analysis, layers),
    )


def folded_text(meta: dict[str, object]) -> str:
    """What a profile folded to stay within its memory limit (``--max-memory``), or ""."""
    folded = meta.get("folded")
    if not isinstance(folded, dict) or not folded.get("samples"):
        return ""
    return (
        f"{folded['samples']:,} samples before {folded['until']:.0f} s folded into {folded['window']:g} s "
        "windows (totals, phases and layers exact; timeline coarser; --max-memory)"
    )


def build_report(profile: Profile, analysis: Analysis, source: str = "", step: int | None = None) -> Report:
    """The report of ``profile`` from its ``analysis`` (``breakdown.analyze`` of the same profile);
    ``step``: one step (1-based) to show beside the average (ValueError when there is no such step)."""
    layers = StepLayers(analysis)
    processes = analyze_processes(profile, analysis.rules, analysis.sample_phase)
    device_steps = device_time(profile, analysis.steps)
    verdict = judge_on_device(judge(analysis, processes), device_steps)
    traced = ops_report(profile)
    idle = traced.device.idle if traced.device else None
    return Report(
        source=source,
        duration=profile.duration,
        unit="samples" if profile.meta.get("weight_unit", "seconds") == "count" else "s",
        samples=profile.num_samples,
        folded=folded_text(profile.meta),
        threads=len(profile.threads),
        mode=analysis.mode,
        loop_thread=analysis.thread_name,
        deep_learning=analysis.is_deep_learning,
        phases=phase_shares(analysis.phase_seconds),
        steps=_steps(analysis, layers),
        startup=Startup(analysis.startup_seconds, analysis.startup_import_seconds, analysis.import_seconds),
        layers=_layer_rows(analysis.layers, analysis.loop_seconds, traced.ops),
        functions=_rows(analysis.functions, analysis.function_total),
        idle_left_out=analysis.idle_left_out,
        verdict=VerdictSection(
            verdict.level,
            verdict.level in ("highly", "moderately"),
            100 * verdict.data_share,
            verdict.basis,
            verdict.text,
            {"highly": 100 * HIGHLY, "moderately": 100 * MODERATELY},
            verdict.advice,
            DeviceVerdict(idle.level, idle.verdict) if idle else None,
        ),
        processes=processes_section(processes),
        ops=traced.ops,
        memory=traced.memory,
        device=traced.device,
        device_time=device_steps,
        step=step_detail(analysis, layers, step) if step is not None else None,
        graph_advice=graph_advice(analysis, layers.names, layers.average, _steady_wall(analysis))
        + precision_advice(profile.trace),
        memory_flow=memory_flow(profile.trace) if profile.trace is not None else None,
        gil=gil_section(profile),
    )


def _steady_wall(analysis: Analysis) -> float:
    steps = analysis.steps
    return float(steps.walls[steps.steady].mean()) if steps.count and steps.steady.any() else 0.0


def report_of(
    profile: Profile,
    rules: Sequence[Rule] = (),
    mode: str = "wall",
    idle: bool = False,
    source: str = "",
    step: int | None = None,
) -> Report:
    """The report of a profile analysed on its own (``flameprof report``, the live view); ``idle``:
    the top functions keep other threads' idle waits; ``step``: as ``build_report``'s."""
    return build_report(profile, analyze(profile, rules, mode, TOP, idle), source, step)
