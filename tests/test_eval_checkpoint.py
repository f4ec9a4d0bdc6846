"""Evaluation (forwards without autograd in a run that trains) and checkpointing are phases of their
own, ``eval`` and ``checkpoint``: their share of the run matches the loop's own timers, and they are
neither steps nor part of the steady-state step statistics. A run that only infers keeps ``forward``."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from loop_models import mlp

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.report import build_report
from flameprof.model.phase_names import LEAF_PHASES
from flameprof.profiler import Profiler
from flameprof.render.report import apart_line

now = time.perf_counter


@torch.no_grad()
def evaluate(model, batches) -> float:
    """As nanoGPT's estimate_loss: eval mode, forwards without autograd, the loss read each batch."""
    model.eval()
    total = 0.0
    for x, y in batches:
        total += torch.nn.functional.cross_entropy(model(x), y).item()
    model.train()
    return total


def test_evaluation_and_checkpoints_are_apart_from_the_steps(sampler_kind, one_thread, tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 4, (64,))
    held_out = [(torch.randn(256, 256), torch.randint(0, 4, (256,))) for _ in range(6)]
    spent = dict.fromkeys(("eval", "checkpoint"), 0.0)
    train_walls = []
    with Profiler(rate=1000) as p:
        start = t = now()
        i = 0
        while t - start < 3:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            t1 = now()
            train_walls.append(t1 - t)
            if i % 20 == 19:
                evaluate(model, held_out)
                t2 = now()
                torch.save(model.state_dict(), tmp_path / "ckpt.pt")
                t3 = now()
                spent["eval"] += t2 - t1
                spent["checkpoint"] += t3 - t2
            t = now()
            i += 1
    analysis = analyze(p.profile)
    total = t - start
    seconds = dict(zip(LEAF_PHASES, analysis.phase_seconds.tolist()))
    basis = analysis.loop_seconds
    assert spent["eval"] / total > 0.1 and spent["checkpoint"] / total > 0.01
    for phase in ("eval", "checkpoint"):
        assert abs(100 * (seconds[phase] / basis - spent[phase] / total)) <= 2, (phase, spent, seconds)
    steps = analysis.steps
    assert steps.source == "marks:step" and abs(steps.count - i) <= 1
    assert (
        steps.steady_phase_seconds()[[LEAF_PHASES.index("eval"), LEAF_PHASES.index("checkpoint")]].sum() == 0
    )
    assert np.median(steps.walls[steps.steady]) == pytest.approx(np.median(train_walls), rel=0.05)
    # the steps with an evaluation in them count only their training (each evaluation is ~10 steps)
    evaluated = steps.phase_seconds[:, LEAF_PHASES.index("eval")] > 0
    assert evaluated.sum() >= 3 and np.median(steps.walls[evaluated]) < 1.5 * np.median(train_walls)
    line = apart_line(build_report(p.profile, analysis))
    assert "evaluation" in line and "checkpointing" in line


def test_a_run_that_only_infers_keeps_forward(sampler_kind, one_thread):
    model = mlp().eval()
    x = torch.randn(256, 256)
    with Profiler(rate=1000) as p, torch.inference_mode():
        for _ in range(60):
            model(x)
    analysis = analyze(p.profile)
    seconds = dict(zip(LEAF_PHASES, analysis.phase_seconds.tolist()))
    assert seconds["eval"] == 0 and seconds["forward"] > 0.5 * analysis.loop_seconds
    assert analysis.steps.source == "marks:forward" and analysis.steps.count == 59


def test_a_weight_update_without_autograd_is_not_evaluation():
    """A loop that updates its weights by hand under ``torch.no_grad()``: no module call in that
    region, so it keeps its phase; a region with a module call in the same run is eval."""
    from test_phases import CALL, LAYER, LINEAR, MODULE, TENSOR_BACKWARD, classify

    from flameprof.model.profile import Frame
    from flameprof.model.records import NO_GRAD

    update = Frame("train", "/work/train.py", 10)
    evaluate = [MODULE, Frame("evaluate", "/work/train.py", 50), NO_GRAD]
    got = classify(
        [MODULE, update, NO_GRAD, Frame("sgd_by_hand", "/work/train.py", 20)],
        [*evaluate, CALL, LAYER, LINEAR],
        [*evaluate, Frame("get_batch", "/work/train.py", 5)],
        [MODULE, TENSOR_BACKWARD],
        [MODULE, Frame("save", "/venv/lib/python3.11/site-packages/torch/serialization.py", 900)],
    )
    assert got == ["other", "eval", "eval", "backward", "checkpoint"]
    # without backward or optimizer in the run, the same evaluation is forward
    assert classify([*evaluate, CALL, LAYER, LINEAR]) == ["forward"]
