"""Bounded memory: past its memory limit a profile folds its oldest samples and marks into time windows,
keeping totals per stack, thread, phase and layer, step counts and the first step exact."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest
from conftest import REPO, run_flameprof

from flameprof.analyze.breakdown import analyze
from flameprof.collect.engine.counters import MAX_POINTS, CounterRecorder
from flameprof.collect.engine.memory_limit import LIST_ROW_BYTES, RAW_SHARE, MemoryLimit
from flameprof.examples import budget_loop
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.records import GIL_HELD, GIL_UNKNOWN, Frame, Mark
from flameprof.model.time_windows import WindowedMarks, WindowedSamples, windowed_marks


def test_folding_keeps_totals_and_a_coarser_window_merges_cells():
    folded = WindowedSamples(window=1.0)
    folded.add(0, [0.1, 0.5, 1.2, 2.7, 3.1], [0, 0, 0, 1, 0], [5, 5, 5, 6, 5], [0.1] * 5, [0.05] * 5)
    assert len(folded) == 4 and folded.samples == 5 and folded.until == 3.1
    folded.coarsen()
    assert folded.window == 2.0 and len(folded) == 3  # windows 0-2 and 2-4; thread 1 apart
    time, thread, stack, wall, cpu, gil = folded.rows()
    assert time == sorted(time) and sum(wall) == pytest.approx(0.5) and sum(cpu) == pytest.approx(0.25)
    # a cell is stamped at its last sample, so it stays on the same side of a step boundary
    assert time == [1.2, 2.7, 3.1] and gil == [GIL_UNKNOWN] * 3  # rows given without GIL states

    # samples of different GIL states stay apart, so the time a thread held the GIL stays exact
    states = WindowedSamples(window=4.0)
    states.add(0, [0.1, 0.2, 0.3], [0, 0, 0], [5, 5, 5], [0.1, 0.2, 0.4], [0.0] * 3, [GIL_HELD, 0, GIL_HELD])
    by_state = dict(zip(states.rows()[5], states.rows()[3]))
    assert by_state == {GIL_HELD: pytest.approx(0.5), 0: pytest.approx(0.2)}

    marks = WindowedMarks(window=4.0)
    marks.add([Mark(t, 0, "step", "user") for t in (0.5, 1.5, 2.5, 4.5)] + [Mark(1.0, 0, "epoch", "")])
    marks.coarsen()
    steps = windowed_marks(marks.marks(), "step", 0)
    assert len(steps) == 1 and steps[0].count == 4 and steps[0].first == 0.5 and steps[0].last == 4.5
    assert steps[0].value == "user" and [m.count for m in windowed_marks(marks.marks(), "epoch")] == [1]
    # a folded mark folded again (a merged profile) still counts every mark it stands for
    again = WindowedMarks()
    again.add(marks.marks())
    assert [m.count for m in windowed_marks(again.marks(), "step")] == [4]


def _synthetic(
    builder: ProfileBuilder, memory: MemoryLimit | None, seconds: float, seed: int = 0, start: float = 5.0
):
    """Four threads at 100 Hz over ``seconds``, a step every 50 ms, random stacks; the memory checked
    every simulated second, as its tick hook would be."""
    rng = random.Random(seed)
    threads = [builder.thread_id(1, i, f"t{i}") for i in range(4)]
    root = builder.frame(Frame("<module>", "/w/train.py", 1))
    stacks = [
        builder.stack_id([root, builder.frame(Frame(f"f{i}", "/w/train.py", 10 + i))]) for i in range(30)
    ]
    step_thread = threads[0]
    for tick in range(int(seconds * 100)):
        t = start + tick / 100
        for thread in threads:
            builder.add_sample(t, thread, rng.choice(stacks), 0.01, rng.choice((0.0, 0.01)))
        if tick % 5 == 0:
            builder.marks.append(Mark(t, step_thread, "step", "user"))
        if memory is not None and tick % 100 == 99:
            memory.check()


def test_a_memory_limit_bounds_the_raw_rows_and_keeps_every_total():
    reference, bounded = ProfileBuilder(), ProfileBuilder()
    memory = MemoryLimit(bounded, limit=400_000)
    _synthetic(reference, None, 600)
    _synthetic(bounded, memory, 600)
    assert memory.folds > 0 and bounded.windowed.samples > 0
    assert len(bounded.cpu) * LIST_ROW_BYTES <= RAW_SHARE * memory.limit * 1.1
    assert bounded.num_samples == reference.num_samples == 600 * 100 * 4

    full, small = reference.build(), bounded.build()
    assert small.num_samples < full.num_samples / 2
    for column in ("sample_wall", "sample_cpu"):

        def per_cell(p, column=column):
            key = p.sample_thread.astype(np.int64) * 1000 + p.sample_stack
            return np.bincount(key, weights=getattr(p, column), minlength=4000)

        assert np.allclose(per_cell(small), per_cell(full))
    # steps: as many, the first where it was; the last raw ones keep their detail
    a, b = analyze(full), analyze(small)
    assert b.steps.count + b.steps.folded == a.steps.count == 600 * 20 - 1
    assert b.steps.start == a.steps.start == 5.0 and b.steps.folded > 0
    assert np.allclose(b.steps.walls, 0.05) and b.phase_seconds.sum() == pytest.approx(a.phase_seconds.sum())


def test_a_window_opened_after_the_fold_leaves_the_folded_rows_out():
    builder = ProfileBuilder()
    memory = MemoryLimit(builder, limit=400_000)
    _synthetic(builder, memory, 300)
    first = builder.num_samples
    builder.windowed.cut(first)  # a window opens, as Profiler.start does
    epoch = builder.windowed.cut(first)  # and another at the same sample
    _synthetic(builder, memory, 100, seed=1, start=305.0)
    assert builder.rows_taken_off > first  # some of the window's rows were folded
    window = builder.build(first, epoch=epoch)
    assert window.sample_time.min() >= 305.0
    assert window.sample_wall.sum() == pytest.approx(100 * 4)  # its own samples, no more
    everything = builder.build()
    assert everything.sample_wall.sum() == pytest.approx(400 * 4)


def test_counters_thin_their_older_half_and_keep_peaks():
    recorder = CounterRecorder(0.0, interval=0.0)
    for i in range(MAX_POINTS + 10):
        recorder.times.append(float(i))
        recorder.cpu.append(100.0 if i % 2 else 0.0)
        recorder.rss.append(2e9 if i == 10 else 1e9)
    recorder._thin()
    points = recorder.points()
    times, cpu = points["cpu_percent"]
    assert len(times) == len(cpu) < MAX_POINTS and times == sorted(times)
    assert cpu[:10] == [50.0] * 10  # a pair of 0 % and 100 % intervals: 50 % over both
    assert max(points["rss_bytes"][1]) == 2e9


@pytest.mark.parametrize(("way", "native"), [("script", "1"), ("command", "1"), ("script", "0")])
def test_a_run_past_its_budget_matches_the_programs_own_timers(tmp_path, way, native):
    program = budget_loop.__file__
    target = [program, "6", "truth.json"]
    if way == "command":
        target = ["--", sys.executable, "-m", "flameprof.examples.budget_loop", "6", "truth.json"]
    proc = run_flameprof(
        "run", "--rate", "2000", "--max-memory", "1M", "-o", "out", *target,
        cwd=tmp_path, env={"FLAMEPROF_NATIVE": native, "PYTHONPATH": REPO}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "folded into" in proc.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    profile = storage.load(str(tmp_path / "out" / "profile.flameprof"))
    assert profile.meta["folded"]["samples"] > 0
    analysis = analyze(profile)
    assert analysis.steps.count + analysis.steps.folded == truth["steps"] - 1
    assert analysis.steps.folded > 0
    sampled = budget_loop.sampled_seconds(profile, analysis.thread)
    share = sampled["light"] / (sampled["light"] + sampled["heavy"])
    true_share = truth["light"] / (truth["light"] + truth["heavy"])
    # within 2 points, or 4 standard errors of the sample count when that is wider (the Python
    # sampler, starved by 17 threads, takes about 140 samples a second here)
    rate = profile.meta.get("achieved_rate") or profile.meta["rate"]  # a job's merged parts: the rate asked
    samples = (sampled["light"] + sampled["heavy"]) * rate
    bound = max(0.02, 4 * (true_share * (1 - true_share) / samples) ** 0.5)
    assert abs(share - true_share) < bound, (share, true_share, samples)


def test_rows_that_differ_in_more_than_their_window_stop_the_coarsening():
    """More distinct (thread, stack) rows than the folded share holds: the window doubles while
    that helps, then stops (a program with many stacks must not hang in its sampler)."""
    builder = ProfileBuilder()
    memory = MemoryLimit(builder, limit=2**20)
    for i in range(5000):  # 5,000 stacks, each once, all in one window: nothing to merge
        builder.add_sample(1.0 + i * 1e-4, 0, i, 0.01, 0.0)
    builder.windowed.add(0, *builder.take_list_rows(5000))
    memory.check()
    assert len(builder.windowed) == 5000 and builder.windowed.window <= 16.0
