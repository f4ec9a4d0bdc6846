"""Budgets and baselines for the CI gate: shares of phases, layers and functions, checked against limits.

Everything is measured on the loop's thread (the thread the breakdown analyses), in wall time,
over a *basis*:

* ``wall``: the loop thread's whole run, start-up included;
* ``step``: the steady-state steps only (warm-up steps and whatever ran before the first or after
  the last step are left out), which is what a training job's speed depends on;
* ``auto``: ``step`` when every profile involved has steady-state steps, otherwise ``wall``.

A budget ``NAME=PCT`` holds when NAME's time is at most PCT % of the basis. NAME is a phase
(``data``, ``data.wait``, ``forward``, ...), ``layer:REGEX`` (stacks under a layer whose name
matches, e.g. ``layer:encoder``) or ``fn:REGEX`` (stacks through a function whose label
``name (file:line)`` matches). Time is inclusive: a stack counts once however many frames match.

Against a baseline, every phase, layer and function is compared: with the ``wall`` basis its share
may grow by at most the allowed percentage points; with ``step`` its time per step may grow by at
most the allowed percentage of the baseline's step time (so a uniform slow-down is caught too).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FlameprofError
from ..model.frames import Labeler
from ..model.phase_names import LEAF_PHASES, PHASES
from ..model.profile import Frame, Profile
from .ancestry import Ancestry
from .breakdown import Analysis, analyze, rank_frames, stack_has, stack_weights

BASES = ("auto", "wall", "step")
_CODE_KINDS = ("python", "native")
PHASE_IDS = {name: [LEAF_PHASES.index(name)] for name in LEAF_PHASES} | {
    "data": [LEAF_PHASES.index("data.wait"), LEAF_PHASES.index("data.fetch")]
}


@dataclass(frozen=True)
class Budget:
    """``kind`` is phase, layer or fn; ``limit`` is a percentage of the basis."""

    kind: str
    pattern: str
    limit: float

    @property
    def name(self) -> str:
        return self.pattern if self.kind == "phase" else f"{self.kind}:{self.pattern}"


def parse_budget(text: str) -> Budget:
    """``data=25%``, ``layer:encoder=40``, ``fn:re\\.compile=5%`` into a Budget; FlameprofError when
    malformed."""
    name, sep, value = text.rpartition("=")
    name, value = name.strip(), value.strip().rstrip("%").strip()
    try:
        limit = float(value)
        if not sep or not name or not 0 <= limit <= 100:
            raise ValueError
    except ValueError:
        raise FlameprofError(
            f"bad budget {text!r}: expected NAME=PCT with PCT between 0 and 100, e.g. data=25%"
        ) from None
    kind, colon, pattern = name.partition(":")
    if colon and kind in ("layer", "fn"):
        if not pattern:
            raise FlameprofError(f"bad budget {text!r}: empty {kind} pattern")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FlameprofError(f"bad budget {text!r}: invalid regular expression ({exc})") from None
        return Budget(kind, pattern, limit)
    if name not in PHASE_IDS:
        raise FlameprofError(
            f"bad budget {text!r}: {name!r} is not a phase ({', '.join(PHASE_IDS)}); "
            "use layer:REGEX or fn:REGEX for layers and functions"
        )
    return Budget("phase", name, limit)


@dataclass
class Basis:
    """The samples a profile is measured on: ``mask`` over samples, ``seconds`` in total, ``steps``
    counted."""

    name: str
    mask: np.ndarray
    seconds: float
    steps: int


def steady_mask(analysis: Analysis) -> tuple[np.ndarray, int]:
    """Samples of the loop thread inside steady-state steps, and how many such steps there are."""
    steps, profile = analysis.steps, analysis.profile
    if not steps.count or not steps.steady.any():
        return np.zeros(profile.num_samples, dtype=bool), 0
    index = np.searchsorted(steps.bounds, profile.sample_time, side="right") - 1
    inside = (index >= steps.warmup) & (index < steps.count)
    return analysis.loop_mask() & inside, int(steps.count - steps.warmup)


def make_basis(analysis: Analysis, name: str) -> Basis:
    if name == "step":
        mask, count = steady_mask(analysis)
        if not count:
            raise FlameprofError(
                "no steady-state training/inference steps found in the profile; "
                "use --of wall (or mark steps with flameprof.step())"
            )
    else:
        mask, count = analysis.loop_mask(), 1
    return Basis(name, mask, float(analysis.profile.sample_wall[mask].sum()), count)


def choose_basis(name: str, analyses: list[Analysis]) -> str:
    """Resolve ``auto``: ``step`` when every analysis has steady-state steps."""
    if name != "auto":
        return name
    return "step" if all(steady_mask(a)[1] for a in analyses) else "wall"


def _predicate(budget: Budget, labeler: Labeler) -> Callable[[Frame], bool]:
    rx = re.compile(budget.pattern)
    if budget.kind == "layer":
        return lambda f: f.kind == "layer" and rx.search(f.name) is not None
    return lambda f: f.kind in _CODE_KINDS and rx.search(labeler.label(f)) is not None


def budget_seconds(analysis: Analysis, basis: Basis, budget: Budget) -> float:
    """Seconds of the basis that ``budget``'s phase, layer or function accounts for."""
    profile = analysis.profile
    if budget.kind == "phase":
        hit = np.isin(analysis.sample_phase, PHASE_IDS[budget.pattern])
    else:
        flags = stack_has(profile, _predicate(budget, Labeler(profile.meta)))
        hit = np.append(flags, False)[profile.sample_stack]
    return float(profile.sample_wall[basis.mask & hit].sum())


def item_seconds(analysis: Analysis, basis: Basis) -> dict[tuple[str, str], float]:
    """Inclusive seconds of every phase, layer and function within the basis, keyed (kind, name)."""
    profile = analysis.profile
    out: dict[tuple[str, str], float] = {}
    for name, ids in PHASE_IDS.items():
        if name in PHASES or "." in name:
            out[("phase", name)] = float(
                profile.sample_wall[basis.mask & np.isin(analysis.sample_phase, ids)].sum()
            )
    weights = stack_weights(profile, profile.sample_wall, basis.mask)
    frames = profile.frames
    tree = Ancestry(profile.stack_parent)
    for row in rank_frames(
        profile, weights, [f.kind == "layer" for f in frames], None, lambda f: f.name, tree
    ):
        out[("layer", row.name)] = row.total_s
    labeler = Labeler(profile.meta)
    code = [f.kind in _CODE_KINDS for f in frames]
    for row in rank_frames(profile, weights, code, None, labeler.label, tree):
        out[("fn", row.name)] = row.total_s
    return out


@dataclass
class CheckResult:
    basis: str
    budgets: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[dict[str, Any]] = field(default_factory=list)  # every item over the allowed growth
    changes: list[dict[str, Any]] = field(default_factory=list)  # the largest growths, for context
    max_regression: float | None = None

    @property
    def ok(self) -> bool:
        return all(b["ok"] for b in self.budgets) and not self.regressions

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "basis": self.basis,
            "budgets": self.budgets,
            "max_regression_pct": self.max_regression,
            "regressions": self.regressions,
            "largest_changes": self.changes,
        }


def check(
    profile: Profile,
    budgets: list[Budget],
    basis: str = "auto",
    baseline: Profile | None = None,
    max_regression: float | None = None,
    top: int = 10,
    names: tuple[str, str] = ("the profile", "the baseline profile"),
) -> CheckResult:
    """Measure ``budgets`` on ``profile`` and, with a baseline, the growth of every phase, layer and
    function. ``names`` (the profile's and the baseline's) say which one an error is about."""
    new = analyze(profile, top=0)
    base = analyze(baseline, top=0) if baseline is not None else None
    name = choose_basis(basis, [new] + ([base] if base is not None else []))
    new_basis = make_basis(new, name)
    if new_basis.seconds <= 0:
        raise FlameprofError(f"{names[0]}: no samples on its loop thread to check")
    result = CheckResult(name, max_regression=max_regression)
    for budget in budgets:
        seconds = budget_seconds(new, new_basis, budget)
        pct = 100.0 * seconds / new_basis.seconds if new_basis.seconds > 0 else 0.0
        result.budgets.append(
            {
                "name": budget.name,
                "kind": budget.kind,
                "limit_pct": budget.limit,
                "actual_pct": round(pct, 3),
                "seconds": round(seconds, 6),
                "ok": round(pct, 6) <= budget.limit,
            }
        )
    if base is None or max_regression is None:
        return result
    base_basis = make_basis(base, name)
    if base_basis.seconds <= 0:
        raise FlameprofError(f"{names[1]}: no samples on its loop thread to compare with")
    new_items, base_items = item_seconds(new, new_basis), item_seconds(base, base_basis)
    # Normalise to shares (wall) or to per-step seconds over the baseline's step time (step).
    new_norm = (
        new_basis.seconds if name == "wall" else new_basis.steps * base_basis.seconds / base_basis.steps
    )
    base_norm = base_basis.seconds
    rows: list[dict[str, Any]] = []
    for key in set(new_items) | set(base_items):
        before = 100.0 * base_items.get(key, 0.0) / base_norm
        after = 100.0 * new_items.get(key, 0.0) / new_norm if new_norm > 0 else 0.0
        rows.append(
            {
                "kind": key[0],
                "name": key[1],
                "base_pct": round(before, 3),
                "new_pct": round(after, 3),
                "growth_pct": round(after - before, 3),
            }
        )
    rows.sort(key=lambda r: (-r["growth_pct"], r["kind"], r["name"]))
    result.regressions = [r for r in rows if r["growth_pct"] > max_regression]
    result.changes = rows[:top]
    return result
