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
from ..model.phase_names import LEAF_PHASES
from ..model.profile import Frame, Profile
from .ancestry import Ancestry
from .phases import Rule, is_import, phase_of_samples, profile_rules
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
    mode: str = "wall"  # the weights of ``functions``: wall, cpu or samples
    ancestry: Ancestry | None = None  # of the profile's stack table, for analyses that walk it again

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
        on_loop: np.ndarray = self.profile.sample_thread == self.thread
        return on_loop

    def seconds_where(self, stack_flags: np.ndarray, phases: Sequence[str] | None = None) -> float:
        """Loop-thread wall seconds of samples whose stack is flagged (and, if given, in ``phases``)."""
        p = self.profile
        mask = self.loop_mask() & np.append(stack_flags, False)[p.sample_stack]
        if phases is not None:
            mask &= np.isin(self.sample_phase, [LEAF_PHASES.index(x) for x in phases])
        return float(p.sample_wall[mask].sum())


def analyze(
    profile: Profile, rules: Sequence[Rule] = (), mode: str = "wall", top: int | None = 10, idle: bool = True
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
    tree = Ancestry(profile.stack_parent)
    layer_weight = stack_weights(profile, profile.sample_wall, loop)
    layers = rank_frames(
        profile, layer_weight, [f.kind == "layer" for f in frames], None, lambda f: f.name, tree
    )
    weights = profile.weights(mode)
    labeler = Labeler(profile.meta)
    waiting = np.zeros(profile.num_samples, dtype=bool)
    if not idle and profile.sample_cpu.sum() > 0:  # only a profile with CPU times can tell
        waiting = ~loop & (profile.sample_cpu < IDLE_CPU_SHARE * profile.sample_wall)
    code_weight = stack_weights(profile, weights, ~waiting)
    functions = rank_frames(
        profile, code_weight, [f.kind in _CODE_KINDS for f in frames], top, labeler.label, tree
    )
    importing = loop & np.append(stack_has(profile, is_import), False)[profile.sample_stack]
    startup = loop & (profile.sample_time < steps.start) if steps.count else np.zeros_like(loop)
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
        mode=mode,
        ancestry=tree,
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
    ancestry: Ancestry | None = None,
) -> list[Row]:
    """Top ``top`` (None: all) frames of the wanted kind by self time (innermost wanted frame) and total time
    (every stack containing it, counted once), merged by display name.

    Linear in the stack table however deep the stacks: a stack's innermost name comes from its parent's,
    and a name's total is the sum of the subtrees of its outermost frames (those with no caller of the
    same name), never a list of frames per stack. ``ancestry`` is the stack table's, when the caller has it.
    """
    ids: dict[str, int] = {}
    frame_name = np.full(len(profile.frames), -1, dtype=np.int64)
    for fid, frame in enumerate(profile.frames):
        if wanted[fid]:
            frame_name[fid] = ids.setdefault(name(frame), len(ids))
    names = list(ids)
    tree = ancestry or Ancestry(profile.stack_parent)
    key = frame_name[profile.stack_frame]
    sampled = np.flatnonzero(stack_weight)
    inner = tree.innermost(key)[sampled]
    named = inner >= 0
    # the weights of the sampled stacks added in stack order, as a running sum per name
    self_s = np.bincount(inner[named], weights=stack_weight[sampled][named], minlength=len(names))
    (below,) = tree.subtree_sums(np.asarray(stack_weight, dtype=np.float64))
    outer = tree.first_occurrence(key)
    total_s = np.bincount(key[outer], weights=below[outer], minlength=len(names))
    present = np.zeros(len(names), dtype=bool)
    present[inner[named]] = True
    present[key[outer][below[outer] != 0]] = True
    self_l, total_l = self_s.tolist(), total_s.tolist()
    ordered = sorted(np.flatnonzero(present).tolist(), key=lambda i: (-self_l[i], -total_l[i], names[i]))
    return [Row(names[i], self_l[i], total_l[i]) for i in ordered[:top]]
