"""Exact steps in loops without an optimizer: each outermost module call of an inference loop, each
``backward()`` of a loop that updates its weights by hand; with gradient accumulation both the
optimizer steps and the micro-steps. Under both samplers, against the loops' own counts and timers."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from loop_models import mlp

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.report import build_report
from flameprof.collect.engine.layers import NAMER
from flameprof.model.phase_names import LEAF_PHASES
from flameprof.profiler import Profiler
from flameprof.render.report import steps_line

now = time.perf_counter


def test_an_inference_loop_has_one_step_per_batch(sampler_kind, one_thread):
    """The model and a loss module are both called once per batch at the top level: the model (most
    time in its layers) makes the steps, one per batch, and the steady p50 is the loop's own."""
    model, criterion = mlp().eval(), torch.nn.CrossEntropyLoss()
    batches = [(torch.randn(256, 256), torch.randint(0, 4, (256,))) for _ in range(4)]
    ends = []  # when each batch's model call returned: the loop's own step boundaries
    with Profiler(rate=1000) as p, torch.inference_mode():
        for i in range(150):
            x, y = batches[i % len(batches)]
            out = model(x)
            ends.append(now())
            criterion(out, y)
    analysis = analyze(p.profile)
    assert analysis.steps.source == "marks:forward"
    assert analysis.steps.count == 149  # the interval between the first batch's end and the last's
    steady = np.median(analysis.steps.walls[analysis.steps.steady])
    assert steady == pytest.approx(np.median(np.diff(ends)), rel=0.05)


def test_a_loop_updating_weights_by_hand_steps_at_each_backward(sampler_kind, one_thread):
    """No optimizer, no DataLoader, no flameprof.step(): each backward ends a step; steps and phases
    match the loop's own timers, over the same steps: the steady ones (the shares leave warm-up out,
    and a first forward of the process can take 300 ms where the others take 3: counted over the
    whole loop, that moved the forward share 5.7 points)."""
    model = mlp()
    batches = [(torch.randn(64, 256), torch.randint(0, 4, (64,))) for _ in range(8)]
    spent: dict[str, list[float]] = {"forward": [], "backward": []}  # each iteration's
    ends, steps = [], 0
    with Profiler(rate=1000) as p:
        start = t = now()
        while t - start < 2.5:
            x, y = batches[steps % len(batches)]
            t1 = now()
            out = model(x)
            t2 = now()
            loss = torch.nn.functional.cross_entropy(out, y)
            t3 = now()
            loss.backward()
            t4 = now()
            ends.append(t4)
            for param in model.parameters():  # as word_language_model does
                param.data.add_(param.grad, alpha=-0.01)
                param.grad = None
            spent["forward"].append(t2 - t1)
            spent["backward"].append(t4 - t3)
            steps += 1
            t = now()
    analysis = analyze(p.profile)
    assert analysis.steps.source == "marks:backward" and abs(analysis.steps.count - steps) <= 1
    steady = np.median(analysis.steps.walls[analysis.steps.steady])
    assert steady == pytest.approx(np.median(np.diff(ends)), rel=0.05)
    seconds = dict(zip(LEAF_PHASES, analysis.steps.steady_phase_seconds().tolist()))
    # step k runs from the end of backward k to the end of backward k + 1 (iteration k + 1's forward
    # and backward): the steady steps, from the warm-up's end to the last step's
    first, last = analysis.steps.warmup, analysis.steps.count
    total, truth = sum(seconds.values()), ends[last] - ends[first]
    for phase, times in spent.items():
        value = sum(times[first + 1 : last + 1])
        assert abs(100 * (seconds[phase] / total - value / truth)) <= 2, (phase, value, truth, seconds)


def test_gradient_accumulation_reports_steps_and_micro_steps(sampler_kind):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 256), torch.randint(0, 4, (8,))
    with Profiler(rate=1000) as p:
        for i in range(40):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if i % 4 == 3:
                opt.step()
                opt.zero_grad()
    analysis = analyze(p.profile)
    assert analysis.steps.source == "marks:step" and analysis.steps.count == 9
    assert analysis.steps.micro_steps == 36  # the backward passes of those nine steps
    assert "36 micro-steps" in steps_line(build_report(analysis.profile, analysis).steps)


def test_steps_inferred_from_samples_are_called_estimates():
    from test_steps import STEADY, loop_profile

    analysis = analyze(loop_profile([STEADY] * 10, marks=None))
    assert analysis.steps.source == "samples"
    line = steps_line(build_report(analysis.profile, analysis).steps)
    assert "estimated from the samples" in line and "estimates" in line


def test_profiling_that_starts_inside_a_forward_takes_the_model_for_the_root(sampler_kind):
    """As when attaching to a running job: the hooks arrive while the model's forward runs, whose
    two Sequential blocks are called at the top of nothing flameprof has seen yet."""
    profilers = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(
                torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(2)
            )

        def forward(self, x):
            if not profilers:
                profilers.append(Profiler(rate=1000).start())
            for block in self.blocks:
                x = block(x)
            return x

    model = Net().eval()
    with torch.inference_mode():
        for _ in range(20):
            model(torch.randn(4, 8))
    analysis = analyze(profilers[0].stop())
    # the first call was under way when profiling began: 19 marked calls, 18 steps between them
    assert analysis.steps.source == "marks:forward" and analysis.steps.count == 18


class Holder(torch.nn.Module):
    """Holds the model and calls it from a method, never being called itself (as a LightningModule's
    training_step does)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).sum()


def test_the_step_marks_name_a_held_model_as_its_holder_does(sampler_kind):
    """At 1 Hz no sample falls in a forward, so the step marks name the model first: as its holder's
    ``net``, the name the sampler gives it (they named it a root, ``Sequential``, and the sampler's
    layers then followed: Lightning's layers lost their ``Lit.`` in one CI run)."""
    holder, x = Holder(), torch.randn(4, 8)
    with Profiler(rate=1):
        for _ in range(3):
            holder.step(x).backward()
    assert NAMER.path_of(holder.net) == "Holder.net"
    assert NAMER.path_of(holder.net[2]) == "Holder.net.2"
