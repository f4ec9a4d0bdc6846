"""The call tree with each node's weight per phase, so a flame graph can colour frames by phase."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..model.phase_names import LEAF_PHASES
from ..model.profile import Profile
from .phases import Rule, phase_of_samples
from .tree import CallTree, build_tree, match_paths

PREFIX = "phase:"  # the tree's column of a phase's weight: ``PREFIX + name``


def phase_tree(
    profile: Profile, mode: str = "wall", view: str = "code", rules: Sequence[Rule] = ()
) -> CallTree:
    """``build_tree(profile, mode, view)`` with a column per phase its samples have (``PREFIX + name``):
    the weight of that phase's samples under each node. ``rules``: all the rules to classify with
    (``Analysis.rules``); by default the profile's own (``phases.profile_rules``)."""
    tree = build_tree(profile, mode, view)
    sample_phase = phase_of_samples(profile, list(rules) or None)
    for k in np.unique(sample_phase).tolist():
        part = dataclasses.replace(profile)
        part.select(sample_phase == k)
        of_phase = build_tree(part, mode, view)
        match = match_paths(tree, of_phase)
        found = match >= 0
        column = np.zeros(len(tree))
        column[found] = of_phase.total[match[found]]
        tree.columns[PREFIX + LEAF_PHASES[k]] = column
    return tree


def dominant_phases(tree: CallTree) -> tuple[list[str], np.ndarray]:
    """The phases with columns in ``tree`` and, per node, the index among them of its heaviest."""
    names = [name[len(PREFIX) :] for name in tree.columns if name.startswith(PREFIX)]
    if not names:
        return [], np.zeros(len(tree), dtype=np.int64)
    weights = np.stack([tree.columns[PREFIX + n] for n in names])
    return names, weights.argmax(axis=0)
