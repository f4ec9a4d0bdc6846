"""Steps: from marks, from samples, warm-up, loop thread, per-step phase times."""

from __future__ import annotations

import numpy as np
import pytest

from flameprof.analyze.phases import phase_of_samples
from flameprof.analyze.steps import find_steps, loop_thread, warmup_count
from flameprof.model.builder import ProfileBuilder
from flameprof.model.phase_names import LEAF_PHASES
from flameprof.model.profile import Frame, Mark

TORCH = "/venv/lib/python3.11/site-packages/torch/"
MODULE = Frame("<module>", "/work/train.py", 1)
STACKS = {
    "data.fetch": [MODULE, Frame("_BaseDataLoaderIter.__next__", TORCH + "utils/data/dataloader.py", 720)],
    "forward": [MODULE, Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1782)],
    "backward": [MODULE, Frame("Tensor.backward", TORCH + "_tensor.py", 566)],
    "optimizer": [MODULE, Frame("SGD.step", TORCH + "optim/sgd.py", 105)],
    "other": [MODULE],
}
TICK = 0.01


def loop_profile(steps: list[dict[str, int]], marks: str | None = "step", idle_thread: bool = True):
    """Each step runs ``{phase: samples}`` in order on MainThread; a mark named ``marks`` opens each step
    and one closes the last. A second thread idles for the whole run."""
    b = ProfileBuilder()
    idle = b.thread_id(1, 2, "QueueFeederThread") if idle_thread else -1
    main = b.thread_id(1, 1, "MainThread")
    ids = {p: b.stack_id([b.frame(f) for f in frames]) for p, frames in STACKS.items()}
    wait = b.stack_id([b.frame(Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 295))])
    t = 0.0
    for step in steps:
        if marks:
            b.marks.append(Mark(t + 1e-6, main, marks))
        for phase, count in step.items():
            for _ in range(count):
                t += TICK
                b.add_sample(t, main, ids[phase], TICK)
                if idle_thread:
                    b.add_sample(t, idle, wait, TICK)
    if marks:
        b.marks.append(Mark(t + 1e-6, main, marks))
    return b.build()


STEADY = {"data.fetch": 2, "forward": 3, "backward": 4, "optimizer": 1}


def steps_of(profile):
    phases = phase_of_samples(profile)
    return find_steps(profile, phases, loop_thread(profile, phases))


def test_steps_from_marks_have_wall_time_and_time_per_phase():
    profile = loop_profile([{"data.fetch": 30, "forward": 3}] + [STEADY] * 9)
    steps = steps_of(profile)
    assert steps.source == "marks:step" and steps.count == 10
    assert profile.threads[steps.thread].name == "MainThread"
    assert steps.walls == pytest.approx([0.33] + [0.10] * 9)
    fetch, fwd = LEAF_PHASES.index("data.fetch"), LEAF_PHASES.index("forward")
    assert steps.phase_seconds[0, fetch] == pytest.approx(0.30)
    assert steps.phase_seconds[5, fwd] == pytest.approx(0.03)
    assert steps.warmup == 1  # the slow first step
    steady = steps.steady_phase_seconds()
    assert steady[fetch] == pytest.approx(9 * 0.02) and steady.sum() == pytest.approx(0.9)


def test_step_marks_win_over_batch_marks():
    profile = loop_profile([STEADY] * 4)
    main = profile.marks[0].thread
    profile.marks += [Mark(0.05 * i, main, "batch") for i in range(9)]
    assert steps_of(profile).source == "marks:step"
    profile.marks = [m for m in profile.marks if m.name == "batch"]
    steps = steps_of(profile)
    assert steps.source == "marks:batch" and steps.count == 8


def test_steps_inferred_from_samples_without_marks():
    profile = loop_profile([STEADY] * 12 + [{"data.fetch": 2, "forward": 5}], marks=None)
    steps = steps_of(profile)
    assert steps.source == "samples"
    assert steps.count == 13
    assert steps.walls[1:12] == pytest.approx([0.10] * 11)
    assert steps.phase_seconds.sum() == pytest.approx(
        profile.sample_wall[profile.sample_thread == steps.thread].sum()
    )


def test_no_steps_when_nothing_cycles():
    profile = loop_profile([{"other": 50}], marks=None)
    steps = steps_of(profile)
    assert steps.count == 0 and steps.source == "none"
    assert steps.steady_phase_seconds().sum() == 0


def test_loop_thread_prefers_marks_then_deep_learning_time():
    profile = loop_profile([STEADY] * 3, marks=None)
    assert profile.threads[loop_thread(profile, phase_of_samples(profile))].name == "MainThread"
    profile.marks = [Mark(0.0, 0, "step"), Mark(0.1, 0, "step")]  # marks on the idle thread decide
    assert loop_thread(profile, phase_of_samples(profile)) == 0


@pytest.mark.parametrize(
    "walls, expected",
    [
        ([1.0, 1.0], 0),  # too few steps to tell
        ([5.0, 1.0, 1.0, 1.0], 1),  # the first step is always warm-up
        ([5.0, 4.0, 3.0] + [1.0] * 9, 3),  # slow steps after it too
        ([5.0] + [9.0] * 3 + [1.0] * 5, 2),  # at most a quarter of the steps
    ],
)
def test_warmup_count(walls, expected):
    assert warmup_count(np.asarray(walls)) == expected


def test_user_step_marks_and_the_busiest_dataloader_define_steps():
    profile = loop_profile([STEADY] * 6, marks=None)
    main = 1
    opt = [Mark(0.1 * i, main, "step", "optimizer") for i in range(7)]
    user = [Mark(0.2 * i, main, "step", "user") for i in range(4)]
    profile.marks = opt + user
    steps = steps_of(profile)
    assert steps.count == 3 and steps.walls == pytest.approx([0.2] * 3)
    train = [Mark(0.1 * i, main, "batch", "0") for i in range(7)]
    val = [Mark(0.05 + 0.3 * i, main, "batch", "1") for i in range(2)]
    profile.marks = val + train
    steps = steps_of(profile)
    assert steps.source == "marks:batch" and steps.count == 6 and steps.walls == pytest.approx([0.1] * 6)
