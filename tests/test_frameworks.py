"""Real framework runs under ``flameprof run``: steps, phases and layers of a Lightning ``Trainer``
(automatic optimisation) and a Hugging Face ``Trainer``, each checked against the run's own timers.

The programs (tests/data/frameworks/) time forward, backward and the optimizer's update after a
warm-up with hooks the frameworks offer; flameprof's steady-state phase shares must be within 2
points of theirs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch  # noqa: F401  (the runs need torch: without it, test_pythons.sh leaves this file out)
from conftest import run_flameprof

from flameprof.analyze.breakdown import analyze
from flameprof.model import storage
from flameprof.model.phase_names import LEAF_PHASES

DATA = os.path.join(os.path.dirname(__file__), "data", "frameworks")


def profile_framework_run(tmp_path, program: str, *args: str):
    """(analysis, truth) of ``program`` run under flameprof at 1 kHz."""
    proc = run_flameprof(
        "run",
        "-q",
        "--rate",
        "1000",
        "-o",
        str(tmp_path / "out"),
        os.path.join(DATA, program),
        str(tmp_path / "truth.json"),
        *args,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    return analyze(storage.load(tmp_path / "out" / "profile.flameprof")), truth


def assert_steady_phases_match(analysis, truth) -> None:
    seconds = dict(zip(LEAF_PHASES, analysis.steps.steady_phase_seconds().tolist()))
    total = sum(seconds.values())
    for phase, spent in truth["spent"].items():
        off = abs(100 * (seconds[phase] / total - spent / truth["total"]))
        assert off <= 2, (phase, truth, seconds)


def test_lightning_automatic_optimisation(tmp_path):
    """Forward and backward run inside the closure of ``optimizer.step(closure)``: they are forward
    and backward, and only Adam's own update is optimizer."""
    import lightning  # noqa: F401  (installed by the test setup: scripts/test.sh)

    analysis, truth = profile_framework_run(tmp_path, "lightning_timed.py")
    assert analysis.steps.source == "marks:step" and analysis.steps.count >= 290
    assert_steady_phases_match(analysis, truth)
    assert analysis.startup_import_seconds > 0.5  # importing lightning and torch: startup, not a phase
    layers = {row.name for row in analysis.layers}
    assert {"Lit.net (Sequential)", "Lit.net.0 (Linear)", "Lit.net.2 (Linear)"} <= layers  # under the module


def test_hugging_face_trainer(tmp_path):
    import transformers  # noqa: F401

    analysis, truth = profile_framework_run(tmp_path, "hf_trainer_timed.py", str(tmp_path / "trainer"))
    assert analysis.steps.source == "marks:step" and analysis.steps.count >= 110
    assert_steady_phases_match(analysis, truth)
    layers = {row.name for row in analysis.layers}
    assert "BertForSequenceClassification.bert.encoder.layer.1.attention (BertAttention)" in layers
    steady = analysis.steps.walls[analysis.steps.steady]
    assert np.median(steady) > 0
