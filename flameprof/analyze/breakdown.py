"""The deep-learning breakdown of a profile: phases, steps, top layers and top functions.

Phases, steps and layers are measured on the loop's thread (see ``steps.loop_thread``) in wall
time, so shares are shares of the time the training/inference loop took; top functions cover all
threads in the requested weight mode. All work is per interned stack, then one ``bincount`` over
the samples, so a million samples cost a few numpy passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model.frames import Labeler
from ..model.profile import Frame, Profile
from .phases import LEAF_PHASES, Rule, is_import, phase_of_samples, profile_rules
from .steps import StepTable, find_steps, loop_thread

_CODE_KINDS = ("python", "native")
IDLE_CPU_SHARE = 0.05  # a sample whose thread ran on a CPU less than this share of its wall time is idle
_DL_PHASES = [LEAF_PHASES.index(p) for p in ("data.wait", "data.fetch", "forward", "backward", "optimizer")]


@dataclass
class Row:
    """One layer or function: its name and self/total seconds."""

    name: str
    self_s: float
    total_s: float


@dataclass
class Analysis:
    """Everything the report, the summary and the advice need, computed once."""

    profile: Profile
    rules: list[Rule]
    sample_phase: np.ndarray  # leaf-phase id per sample
    thread: int  # the loop's thread, -1 when the profile is empty
    phase_seconds: np.ndarray  # loop thread, whole run, seconds per leaf phase
    steps: StepTable
    layers: list[Row] = field(default_factory=list)  # every layer, by self time
    functions: list[Row] = field(default_factory=list)
    function_total: float = 0.0  # all threads, in ``mode``, the denominator of function shares
    idle_left_out: float = 0.0  # ``mode`` weight of other threads' idle waits, not in ``functions``
    startup_seconds: float = 0.0  # loop thread, before the first step (0 without steps)
    startup_import_seconds: float = 0.0  # of which in the import system
    import_seconds: float = 0.0  # loop thread, whole run, in the import system

    @property
    def loop_seconds(self) -> float:
        return float(self.phase_seconds.sum())

    @property
    def thread_name(self) -> str:
        if 0 <= self.thread < len(self.profile.threads):
            return self.profile.threads[self.thread].name or f"thread {self.thread}"
        return ""

    @property
    def is_deep_learning(self) -> bool:
        """True when the loop thread ran data loading, a model, autograd or an optimizer, or has layers or
        steps."""
        return bool(self.phase_seconds[_DL_PHASES].sum() > 0 or self.layers or self.steps.count)

    def loop_mask(self) -> np.ndarray:
        return self.profile.sample_thread == self.thread

    def seconds_where(self, stack_flags: np.ndarray, phases: Sequence[str] | None = None) -> float:
        """Loop-thread wall seconds of samples whose stack is flagged (and, if given, in ``phases``)."""
        p = self.profile
        mask = self.loop_mask() & np.append(stack_flags, False)[p.sample_stack]
        if phases is not None:
            mask &= np.isin(self.sample_phase, [LEAF_PHASES.index(x) for x in phases])
        return float(p.sample_wall[mask].sum())


def analyze(
    profile: Profile, rules: Sequence[Rule] = (), mode: str = "wall", top: int = 10, idle: bool = True
) -> Analysis:
    """Classify ``profile`` with the user's ``rules`` (plus declared scopes and built-ins) and break it
    down. Without ``idle`` the top functions leave out the idle waits of threads other than the
    loop's (helper threads that sleep all run long: ``Condition.wait``, ``selectors.select``), as
    py-spy leaves idle samples out by default; the loop thread's waits always count."""
    all_rules = profile_rules(profile, rules)
    sample_phase = phase_of_samples(profile, all_rules)
    thread = loop_thread(profile, sample_phase)
    loop = profile.sample_thread == thread
    phase_seconds = np.bincount(
        sample_phase[loop].astype(np.intp), weights=profile.sample_wall[loop], minlength=len(LEAF_PHASES)
    )
    steps = find_steps(profile, sample_phase, thread)
    frames = profile.frames
    layer_weight = stack_weights(profile, profile.sample_wall, loop)
    layers = rank_frames(profile, layer_weight, [f.kind == "layer" for f in frames], None, lambda f: f.name)
    weights = profile.weights(mode)
    labeler = Labeler(profile.meta)
    waiting = np.zeros(profile.num_samples, dtype=bool)
    if not idle and profile.sample_cpu.sum() > 0:  # only a profile with CPU times can tell
        waiting = ~loop & (profile.sample_cpu < IDLE_CPU_SHARE * profile.sample_wall)
    code_weight = stack_weights(profile, weights, ~waiting)
    functions = rank_frames(profile, code_weight, [f.kind in _CODE_KINDS for f in frames], top, labeler.label)
    importing = loop & np.append(stack_has(profile, is_import), False)[profile.sample_stack]
    startup = loop & (profile.sample_time < steps.bounds[0]) if steps.count else np.zeros_like(loop)
    wall = profile.sample_wall
    return Analysis(
        profile,
        list(all_rules),
        sample_phase,
        thread,
        phase_seconds,
        steps,
        layers,
        functions,
        float(weights[~waiting].sum()),
        idle_left_out=float(weights[waiting].sum()),
        startup_seconds=float(wall[startup].sum()),
        startup_import_seconds=float(wall[startup & importing].sum()),
        import_seconds=float(wall[importing].sum()),
    )


def stack_has(profile: Profile, predicate: Callable[[Frame], bool]) -> np.ndarray:
    """Per stack: does it contain a frame for which ``predicate`` is true (evaluated once per frame)."""
    hit = [bool(predicate(f)) for f in profile.frames]
    out: list[bool] = []
    for parent, fid in zip(profile.stack_parent.tolist(), profile.stack_frame.tolist()):
        out.append(hit[fid] or (parent >= 0 and out[parent]))
    return np.asarray(out, dtype=bool)


def stack_weights(profile: Profile, weights: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Summed weight per stack id (samples with an empty stack are dropped)."""
    stacks, w = profile.sample_stack, weights
    if mask is not None:
        stacks, w = stacks[mask], w[mask]
    keep = stacks >= 0
    return np.bincount(stacks[keep], weights=w[keep], minlength=len(profile.stack_parent))


def rank_frames(
    profile: Profile,
    stack_weight: np.ndarray,
    wanted: list[bool],
    top: int | None,
    name: Callable[[Frame], str],
) -> list[Row]:
    """Top ``top`` (None: all) frames of the wanted kind by self time (innermost wanted frame) and total time
    (every stack containing it, counted once), merged by display name."""
    self_s: dict[str, float] = {}
    total_s: dict[str, float] = {}
    stacks = profile.all_stack_frames()
    frames = profile.frames
    for sid in np.nonzero(stack_weight)[0].tolist():
        w = float(stack_weight[sid])
        names = [name(frames[f]) for f in stacks[sid] if wanted[f]]
        if not names:
            continue
        self_s[names[-1]] = self_s.get(names[-1], 0.0) + w
        for n in set(names):
            total_s[n] = total_s.get(n, 0.0) + w
    ordered = sorted(total_s, key=lambda n: (-self_s.get(n, 0.0), -total_s[n], n))
    return [Row(n, self_s.get(n, 0.0), total_s[n]) for n in ordered[:top]]
