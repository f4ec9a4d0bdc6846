"""``--color phase``: each frame gets the phase of most of its samples, from per-phase columns that add
up to the frame's own weight; the CLI and the SVG agree."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from synthetic import ENCODER, PHASE_STACKS, STEP, TRAIN, training_profile

from flameprof.analyze.phase_tree import PREFIX, dominant_phases, phase_tree
from flameprof.analyze.phases import Rule
from flameprof.model import storage
from flameprof.model.frames import Labeler

TICKS = {"data": 5, "encoder": 3, "head": 1, "tokenize": 1, "backward": 2, "optimizer": 1}


def node_named(tree, label: str) -> int:
    return next(i for i in range(1, len(tree)) if tree.label(i) == label)


def test_phase_columns_add_up_and_name_each_frames_heaviest_phase():
    tree = phase_tree(training_profile(TICKS))
    columns = {k[len(PREFIX) :]: v for k, v in tree.columns.items()}
    assert set(columns) == {"data.wait", "forward", "backward", "optimizer", "other"}
    assert np.allclose(sum(columns.values()), tree.total)
    label = Labeler({"cwd": "/work"}).label
    train = node_named(tree, label(TRAIN))
    # 5 of its 13 ticks a step (sums of floats: the order they are added in moves the last bit)
    assert columns["data.wait"][train] == pytest.approx(tree.total[train] * 5 / 13, rel=1e-12)
    names, heaviest = dominant_phases(tree)
    assert names[heaviest[train]] == "data.wait"
    assert names[heaviest[node_named(tree, ENCODER.name)]] == "forward"
    assert names[heaviest[node_named(tree, label(STEP))]] == "optimizer"


def test_a_users_rule_colours_as_it_classifies():
    tree = phase_tree(training_profile(TICKS), rules=[Rule("data.fetch", "tokenize")])
    names, heaviest = dominant_phases(tree)
    tokenize = node_named(tree, Labeler({"cwd": "/work"}).label(PHASE_STACKS["tokenize"][-1]))
    assert names[heaviest[tokenize]] == "data.fetch"


def test_the_cli_colours_the_svg_by_phase(tmp_path):
    path = tmp_path / "p.flameprof"
    storage.save(training_profile(TICKS), str(path))
    out = tmp_path / "p.svg"
    done = subprocess.run(
        [sys.executable, "-m", "flameprof", "render", str(path), "-o", str(out), "--color", "phase"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    svg = out.read_text()
    assert re.search(r'<svg id="f" class="byphase"', svg)
    encoder = re.search(r'<rect [^>]*n="Net.encoder \(Encoder\)"[^>]*>', svg).group(0)
    assert 'p="2"' in encoder  # forward, LEAF_PHASES' third
    assert '<g id="legend" style="display:none">' in svg
