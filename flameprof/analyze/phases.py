"""Phases: which part of a training step each sample belongs to (data, forward, backward, ...).

Rules are data: ``(phase, pattern)`` pairs. A pattern is ``NAME_GLOB`` (matched against the
frame's name, or its last dotted part) or ``PATH_GLOB:NAME_GLOB`` (the path glob is matched
against the end of the frame's file, e.g. ``torch/optim/*.py:*.step``). A stack's phase is
decided by its frames:

* a user rule (``--phase NAME=PATTERN``, or a user scope declared in
  ``profile.meta["scope_phases"]``) beats every built-in rule; among user rules the innermost wins;
* otherwise the built-in rule of highest priority wins, in the order import > checkpoint > data >
  comm > backward > optimizer > sync > forward (so a transform module called by a Dataset is data,
  and a forward recomputed during backward is backward); between ``data.wait`` and ``data.fetch``
  the innermost wins. Time in the import system is ``other`` wherever the import is triggered (the first
  optimizer imports ``torch._dynamo``, a Dataset may import lazily): it is startup, not a phase;
* an optimizer's ``step`` is ``optimizer`` wherever its class is defined (torch wraps every
  subclass's ``step`` in its own file), except the closure it calls back (``optimizer.step(closure)``,
  as Lightning's automatic optimisation and LBFGS do): the closure's frames, and the forward and
  backward it runs, have the phase they would have without the optimizer around them. The
  collector marks the closure (``records.CLOSURE``, ``meta["optimizer_closures"] == "marked"``);
  a profile without the mark (py-spy, an older profile) takes the program's and libraries' code
  reached from an optimizer for its callback;
* evaluation: in a run that trains (some stack is backward or optimizer), a region where autograd
  is off (the collector's ``records.NO_GRAD`` marker: ``torch.no_grad``, ``inference_mode``) whose
  stacks include a module call is ``eval``, all of it but checkpoints, collectives, imports and
  user rules (a validation loop's batches and metrics too); ``torch.enable_grad`` (``records.GRAD``)
  and an optimizer's closure end such a region (LBFGS's ``step`` runs under ``no_grad``, its
  closure under ``enable_grad``); a run that only infers keeps its phases. A region is told by the
  stack down to its outermost marker, so every call of one evaluation function is one region;
* a stack no rule matches is ``other``.

Classification is done once per interned stack (there are few stacks and many samples), in one
pass that reuses the parent's result, so a sample's phase is a numpy gather.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import FlameprofError
from ..model.frames import category
from ..model.phase_names import LEAF_PHASES
from ..model.profile import Frame, Profile
from ..model.records import CLOSURE, GRAD, NO_GRAD

OTHER = LEAF_PHASES.index("other")
DATA_IDS = (LEAF_PHASES.index("data.wait"), LEAF_PHASES.index("data.fetch"))
# Names a rule may use: the leaf phases, and ``data`` meaning ``data.fetch`` (work in this process).
RULE_PHASES = {name: name for name in LEAF_PHASES} | {"data": "data.fetch"}

# Priority of the built-in rules (lower wins); data.wait and data.fetch tie, so the innermost decides.
# The only built-in ``other`` rules are the import system's, and they beat every phase.
_PRIORITY = {
    "other": -2,
    "checkpoint": -1,
    "data.wait": 0,
    "data.fetch": 0,
    "comm": 1,
    "backward": 2,
    "optimizer": 3,
    "sync": 4,
    "forward": 5,
}
OPTIMIZER = LEAF_PHASES.index("optimizer")
FORWARD, BACKWARD = LEAF_PHASES.index("forward"), LEAF_PHASES.index("backward")
EVAL, CHECKPOINT, COMM = LEAF_PHASES.index("eval"), LEAF_PHASES.index("checkpoint"), LEAF_PHASES.index("comm")

# Where the import system loads a module (the frozen bootstrap; the source copy where it is not frozen).
IMPORT_PATTERNS = (
    "<frozen importlib._bootstrap>:_find_and_load",
    "importlib/_bootstrap.py:_find_and_load",
    "<import>:import *",  # the one frame per imported module of the stacks flame graphs show (tidy_stacks)
)
_DL = "torch/utils/data/dataloader.py"
_C10D = "torch/distributed/distributed_c10d.py"
# torch.distributed's collectives and point-to-point calls, and the waits on their handles
_C10D_COLLECTIVES = (
    "all_reduce*",
    "all_gather*",
    "reduce_scatter*",
    "all_to_all*",
    "broadcast*",
    "reduce",
    "gather*",
    "scatter*",
    "*barrier",
    "send*",
    "recv*",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "_coalescing_manager",
)
BUILTIN_RULES: tuple[tuple[str, str], ...] = (
    # The import system: imports are startup, wherever they are triggered.
    *(("other", pattern) for pattern in IMPORT_PATTERNS),
    # Saving a checkpoint: torch.save, safetensors, and the frameworks' checkpointing.
    ("checkpoint", "torch/serialization.py:save"),
    ("checkpoint", "safetensors/torch.py:save*"),
    ("checkpoint", "lightning/pytorch/trainer/trainer.py:Trainer.save_checkpoint"),
    ("checkpoint", "pytorch_lightning/trainer/trainer.py:Trainer.save_checkpoint"),
    ("checkpoint", "lightning/fabric/fabric.py:Fabric.save"),
    ("checkpoint", "transformers/trainer.py:Trainer._save_checkpoint"),
    ("checkpoint", "accelerate/accelerator.py:Accelerator.save_state"),
    # Waiting for a batch from DataLoader workers, and starting/stopping them.
    ("data.wait", f"{_DL}:*._get_data"),
    ("data.wait", f"{_DL}:*._try_get_data"),
    ("data.wait", f"{_DL}:_MultiProcessingDataLoaderIter.__init__"),
    ("data.wait", f"{_DL}:*._shutdown_workers"),
    # Producing a batch in this process: anything else of torch.utils.data (iterator, sampler,
    # fetch, collate, pinning) and so the Dataset and transforms it calls.
    ("data.fetch", "torch/utils/data/*:*"),
    # Backward: autograd entry points and per-layer backward frames (``<path> (backward)``).
    ("backward", "torch/_tensor.py:Tensor.backward"),
    ("backward", "torch/autograd/__init__.py:backward"),
    ("backward", "torch/autograd/__init__.py:grad"),
    ("backward", "* (backward)"),
    # Optimizer: anything in torch.optim (step, zero_grad, their hook wrappers, LR schedulers), the AMP
    # scaler's step/unscale/update and gradient clipping.
    ("optimizer", "torch/optim/*:*"),
    ("optimizer", "torch/amp/grad_scaler.py:GradScaler.step"),
    ("optimizer", "torch/amp/grad_scaler.py:GradScaler.unscale_"),
    ("optimizer", "torch/amp/grad_scaler.py:GradScaler.update"),
    ("optimizer", "torch/nn/utils/clip_grad.py:clip_grad_*"),
    # Host<->device synchronisation. ``.item()``, ``.cpu()``, ``.to()`` are C methods with no
    # Python frame: only native stacks show them (as ``_local_scalar_dense``, cuda*Synchronize).
    ("sync", "torch/cuda/__init__.py:synchronize"),
    ("sync", "torch/cuda/streams.py:*.synchronize"),
    ("sync", "torch/accelerator/*.py:synchronize"),
    ("sync", "torch/mps/*.py:synchronize"),
    ("sync", "torch/xpu/*.py:synchronize"),
    ("sync", "torch/_tensor.py:Tensor.__array__"),
    ("sync", "torch/_tensor.py:Tensor.__format__"),
    ("sync", "torch/_tensor.py:Tensor.__repr__"),
    ("sync", "*_local_scalar_dense*"),
    ("sync", "cuda*Synchronize"),
    ("sync", "cudaMemcpy"),
    # Collective communication between ranks: the time a rank spends in (mostly waiting for) the
    # others. DDP's gradient all_reduce runs in C++ during backward and has no frame of its own.
    *(("comm", f"{_C10D}:{name}") for name in _C10D_COLLECTIVES),
    ("comm", "torch/distributed/_functional_collectives.py:*"),
    ("comm", "torch/distributed/fsdp/*collectives.py:*"),
    # Forward: any nn.Module call.
    ("forward", "torch/nn/modules/module.py:Module._call_impl"),
    ("forward", "torch/nn/modules/module.py:Module._wrapped_call_impl"),
)


@dataclass(frozen=True)
class Rule:
    """One rule: frames matching ``pattern`` (and ``kind``, when given) belong to ``phase``."""

    phase: str
    pattern: str
    user: bool = False
    kind: str = ""

    def compile(self) -> _Matcher:
        return _Matcher(self)


class _Matcher:
    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        path, name = split_pattern(rule.pattern)
        self.path = re.compile("(?:.*/)?" + fnmatch.translate(path)) if path else None
        self.name = re.compile(fnmatch.translate(name))

    def __call__(self, frame: Frame) -> bool:
        return self.file_matches(frame.file) and self.name_matches(frame)

    def file_matches(self, file: str) -> bool:
        if self.path is None:
            return True
        path = file.replace("\\", "/")
        return bool(path and self.path.match(path))

    def name_matches(self, frame: Frame) -> bool:
        """The rule's kind and name glob (its path glob is ``file_matches``)."""
        if self.rule.kind and frame.kind != self.rule.kind:
            return False
        name = frame.name
        return bool(self.name.match(name) or self.name.match(name.rsplit(".", 1)[-1]))


def split_pattern(pattern: str) -> tuple[str, str]:
    """``(path glob or "", name glob)``; the first single colon separates them (``::`` is part of a C++
    name, ``[:]`` a colon in the name)."""
    parts = _PATH_SEP.split(pattern, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else ("", pattern)


_PATH_SEP = re.compile(r"(?<![:\[]):(?![:\]])")


def parse_rule(text: str) -> Rule:
    """``NAME=PATTERN`` from the command line into a user Rule; FlameprofError when malformed."""
    names = ", ".join(RULE_PHASES)
    name, sep, pattern = text.partition("=")
    name, pattern = name.strip(), pattern.strip()
    if not sep or not name or not pattern:
        raise FlameprofError(f"bad --phase rule {text!r}: expected NAME=PATTERN, NAME one of {names}")
    if name not in RULE_PHASES:
        raise FlameprofError(f"bad --phase rule {text!r}: unknown phase {name!r} (expected one of {names})")
    path, func = split_pattern(pattern)
    if not func.strip() or (not path.strip() and func != pattern):
        raise FlameprofError(
            f"bad --phase rule {text!r}: expected PATTERN as FUNCTION or PATH:FUNCTION globs"
        )
    return Rule(RULE_PHASES[name], pattern, user=True)


def scope_rules(profile: Profile) -> list[Rule]:
    """User rules from scopes that declared a phase (``profile.meta["scope_phases"]``); unknown phases are
    ignored."""
    declared = profile.meta.get("scope_phases") or {}
    rules = []
    if isinstance(declared, Mapping):
        for scope, phase in declared.items():
            if isinstance(scope, str) and phase in RULE_PHASES:
                rules.append(Rule(RULE_PHASES[phase], _glob_escape(scope), user=True, kind="scope"))
    return rules


def _glob_escape(text: str) -> str:
    """``text`` as a glob matching itself: wildcards and colons (not a path separator) bracketed."""
    return re.sub(r"([*?\[:])", r"[\1]", text)


def default_rules() -> list[Rule]:
    # A layer frame is a module call wherever it comes from (a trace's module annotations have no
    # Module._call_impl frame around them); its backward frame ``<path> (backward)`` is backward.
    return [Rule(phase, pattern) for phase, pattern in BUILTIN_RULES] + [Rule("forward", "*", kind="layer")]


def profile_rules(profile: Profile, user: Iterable[Rule] = ()) -> list[Rule]:
    """The rules that apply to ``profile``: ``user``'s, then those saved with the profile
    (``meta["phase_rules"]``, ``NAME=PATTERN`` strings), then declared scopes, then the built-ins."""
    return [*user, *_saved_rules(profile), *scope_rules(profile), *default_rules()]


def _saved_rules(profile: Profile) -> list[Rule]:
    """The rules ``run --phase`` saved with the profile; one that does not parse (a hand-edited file)
    is left out, as an unknown declared phase is."""
    rules = []
    for text in profile.meta.get("phase_rules") or ():
        try:
            rules.append(parse_rule(text))
        except FlameprofError:
            continue
    return rules


class Classifier:
    """Assigns phases to frames and stacks; results per frame are cached.

    The state of a stack prefix is ``(user phase or -1, built-in phase or -1, built-in phase
    outside the innermost optimizer or -1)``; ``push`` adds one frame leafward, so a stack is
    classified from its parent in O(1).
    """

    def __init__(self, rules: Sequence[Rule] | None = None, closures_marked: bool = False) -> None:
        rules = default_rules() if rules is None else list(rules)
        self.calls_back = _is_closure if closures_marked else _calls_back
        self._matchers = [r.compile() for r in rules]
        self._cache: dict[Frame, tuple[int, int]] = {}
        # file -> the matchers whose path glob it matches (or that have none): most rules name a file
        # of torch, so the frames of other files try only the few rules without a path
        self._by_file: dict[str, list[_Matcher]] = {}

    def frame_match(self, frame: Frame) -> tuple[int, int]:
        """(user phase id or -1, best built-in phase id or -1) of one frame."""
        hit = self._cache.get(frame)
        if hit is None:
            matchers = self._by_file.get(frame.file)
            if matchers is None:
                matchers = self._by_file[frame.file] = [
                    m for m in self._matchers if m.file_matches(frame.file)
                ]
            user, builtin = -1, -1
            for m in matchers:
                if (m.rule.user and user >= 0) or not m.name_matches(frame):
                    continue
                pid = LEAF_PHASES.index(m.rule.phase)
                if m.rule.user:
                    user = pid
                elif builtin < 0 or _PRIORITY[m.rule.phase] < _PRIORITY[LEAF_PHASES[builtin]]:
                    builtin = pid
            hit = self._cache[frame] = (user, builtin)
        return hit

    def push(self, state: tuple[int, int, int], frame: Frame) -> tuple[int, int, int]:
        """The state of ``prefix + [frame]`` given the state of ``prefix``."""
        return self.push_match(state, self.frame_match(frame), self.calls_back(frame))

    @staticmethod
    def push_match(
        state: tuple[int, int, int], match: tuple[int, int], calls_back: bool
    ) -> tuple[int, int, int]:
        """``push`` of a frame whose ``frame_match`` is ``match`` and ``_calls_back`` is ``calls_back``."""
        user, builtin = match
        parent_user, parent_builtin, outside = state
        if user < 0:
            user = parent_user
        if parent_builtin == OPTIMIZER and builtin < 0 and calls_back:
            parent_builtin = outside  # the optimizer called the program back: as if it were not there
        if builtin == OPTIMIZER and parent_builtin != OPTIMIZER:
            outside = parent_builtin
        if builtin < 0 or (
            parent_builtin >= 0 and _PRIORITY[LEAF_PHASES[parent_builtin]] < _PRIORITY[LEAF_PHASES[builtin]]
        ):
            builtin = parent_builtin
        return user, builtin, outside

    @staticmethod
    def phase_id(state: tuple[int, int, int]) -> int:
        user, builtin, _ = state
        return user if user >= 0 else builtin if builtin >= 0 else OTHER

    def classify(self, frames: Sequence[Frame]) -> str:
        """The leaf phase of a root-first frame list (for renderers walking their own trees)."""
        state = START
        for frame in frames:
            state = self.push(state, frame)
        return LEAF_PHASES[self.phase_id(state)]


START = (-1, -1, -1)  # the state of an empty stack
_IMPORT_MATCHERS = [Rule("other", pattern).compile() for pattern in IMPORT_PATTERNS]


def is_import(frame: Frame) -> bool:
    """Whether ``frame`` is the import system loading a module."""
    return any(m(frame) for m in _IMPORT_MATCHERS)


def _calls_back(frame: Frame) -> bool:
    """Without closure marks: whether ``frame`` is the program's (or a framework's) code, not
    PyTorch's, the standard library's or the interpreter's; reached from an optimizer, it is taken
    for a callback."""
    return category(frame) in ("user", "library")


def _is_closure(frame: Frame) -> bool:
    """Whether ``frame`` is the collector's mark of an optimizer's closure."""
    return frame == CLOSURE


def closures_marked(profile: Profile) -> bool:
    """Whether the collector marked the closures of optimizer steps in ``profile``."""
    return profile.meta.get("optimizer_closures") == "marked"


def phase_of_stacks(profile: Profile, rules: Sequence[Rule] | None = None) -> np.ndarray:
    """Leaf-phase id (index into LEAF_PHASES) of every interned stack of ``profile``.

    ``rules`` defaults to ``profile_rules(profile)`` (built-ins plus declared scopes).
    """
    classifier = Classifier(profile_rules(profile) if rules is None else rules, closures_marked(profile))
    matches = [classifier.frame_match(f) for f in profile.frames]
    callbacks = [classifier.calls_back(f) for f in profile.frames]
    push, phase_id = classifier.push_match, classifier.phase_id
    # per frame: 1 opens a no-grad region, -1 ends it (autograd back on: enable_grad, a closure)
    no_grad = [1 if f == NO_GRAD else -1 if f in (GRAD, CLOSURE) else 0 for f in profile.frames]
    n = len(profile.stack_parent)
    states: list[tuple[int, int, int]] = [START] * n
    out = [OTHER] * n
    region = [-1] * n  # the stack of the outermost no-grad marker on the way, or -1
    for i, (parent, fid) in enumerate(zip(profile.stack_parent.tolist(), profile.stack_frame.tolist())):
        state = states[i] = push(states[parent] if parent >= 0 else START, matches[fid], callbacks[fid])
        out[i] = phase_id(state)
        outer = region[parent] if parent >= 0 else -1
        region[i] = -1 if no_grad[fid] < 0 else outer if outer >= 0 else (i if no_grad[fid] else -1)
    phases = np.asarray(out, dtype=np.int8)
    kept = np.asarray([user >= 0 or builtin == OTHER for user, builtin, _ in states], dtype=bool)
    return _evaluation(phases, np.asarray(region, dtype=np.int64), kept)


def _evaluation(phases: np.ndarray, region: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """``phases`` with evaluation regions made ``eval`` in a run that trains (see the module's
    docstring); ``kept``: stacks a user rule or the import system decided."""
    if not np.isin(phases, [BACKWARD, OPTIMIZER]).any():
        return phases  # a run that only infers
    evaluating = np.unique(region[(region >= 0) & (phases == FORWARD)])
    inside = np.isin(region, evaluating) & (region >= 0) & ~kept & ~np.isin(phases, [CHECKPOINT, COMM])
    phases[inside] = EVAL
    return phases


def phase_of_samples(profile: Profile, rules: Sequence[Rule] | None = None) -> np.ndarray:
    """Leaf-phase id of every sample (an empty stack is ``other``)."""
    per_stack: np.ndarray = np.append(phase_of_stacks(profile, rules), np.int8(OTHER))
    phases: np.ndarray = per_stack[profile.sample_stack]  # index -1 picks the appended ``other``
    return phases


def layer_of_stacks(profile: Profile) -> np.ndarray:
    """Frame id of the innermost layer frame of every stack, or -1 (for tooltips and layer tables)."""
    frames = profile.frames
    is_layer = [f.kind == "layer" for f in frames]
    out: list[int] = []
    for parent, fid in zip(profile.stack_parent.tolist(), profile.stack_frame.tolist()):
        out.append(fid if is_layer[fid] else (out[parent] if parent >= 0 else -1))
    return np.asarray(out, dtype=np.int32)


def layer_of_frames(frames: Sequence[Frame]) -> str | None:
    """Name of the innermost layer frame of a root-first frame list, or None."""
    for frame in reversed(frames):
        if frame.kind == "layer":
            return frame.name
    return None
