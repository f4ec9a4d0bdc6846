"""A thread is recorded where it is at the tick, not where it next lets the GIL go: the shares of
loops that alternate Python work with blocking calls, against the loops' own timers.

A sampler that waited for the GIL saw such a loop blocked nearly all the time (1.7 ms of Python and
2 ms of sleep: 2 % work instead of 36 %). ``scripts/bench_blocking.py`` runs the whole matrix
(burst lengths, rates, longer runs); these runs are short, so their bounds leave room for the
sampling noise of a few thousand samples.
"""

from __future__ import annotations

import pytest

from flameprof.examples.blocking_loop import BLOCKS, compare


def assert_close(truth: dict, sampled: dict, points: float) -> None:
    for part in ("burst", "block"):
        assert abs(100 * (sampled[part] - truth[part])) <= points, (part, truth, sampled)


@pytest.mark.parametrize("in_thread", [False, True], ids=["main", "thread"])
@pytest.mark.parametrize("kind", [kind for kind in BLOCKS if kind != "torch"])
def test_work_between_blocking_calls_keeps_its_share_at_1_khz(kind, in_thread):
    """3 s at 1 kHz, so the sampling noise (which shrinks as the square root of the samples) stays
    well inside the 2-point bound: with 1.5 s the sleep loop missed it once on a quiet machine
    (2.3 points, CPython 3.10)."""
    truth, sampled = compare(kind, rate=1000, seconds=3.0, in_thread=in_thread)
    assert 0.2 < truth["burst"] < 0.5  # the loop did what it was asked
    assert_close(truth, sampled, 2.0)


@pytest.mark.parametrize("in_thread", [False, True], ids=["main", "thread"])
def test_work_between_torch_ops_keeps_its_share_at_1_khz(in_thread):
    """The torch op lets the GIL go. It runs on one thread: after the suite's earlier torch work,
    intra-op threads spinning between ops took both CPUs of this machine, and a loop thread
    waiting for a CPU while holding the GIL is seen late (the README's more-threads-than-CPUs case;
    the full suite missed 2 points once)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        truth, sampled = compare("torch", rate=1000, seconds=1.5, in_thread=in_thread)
    finally:
        torch.set_num_threads(threads)
    assert_close(truth, sampled, 2.0)


@pytest.mark.parametrize(("burst_ms", "seconds"), [(0.2, 4.0), (5.0, 1.5)])
def test_short_and_long_bursts_keep_their_share(burst_ms, seconds):
    """A burst shorter than an interval is hit by a tick or not, at random: its share has the
    binomial noise of the sample count (9 % of 1,500 samples: 0.7 points, and 2 points were
    missed once in eight runs), so it runs 4 s (0.45 points). Longer parts span several ticks
    and are measured far more closely than that."""
    truth, sampled = compare("queue", rate=1000, seconds=seconds, burst_ms=burst_ms, in_thread=True)
    assert_close(truth, sampled, 2.0)


@pytest.mark.parametrize("in_thread", [False, True], ids=["main", "thread"])
def test_work_between_blocking_calls_keeps_its_share_at_100_hz(in_thread):
    """600 samples, each in the burst or not at random (it is shorter than an interval): the bound
    is about 3.6 of their standard deviations, 1.9 points (the old sampler was 30 points off)."""
    truth, sampled = compare("sleep", rate=100, seconds=6, burst_ms=1.7, in_thread=in_thread)
    assert_close(truth, sampled, 7.0)


@pytest.mark.parametrize(("in_thread", "points"), [(False, 2.0), (True, 4.5)], ids=["main", "thread"])
def test_shares_hold_while_other_threads_run(in_thread, points):
    """Two threads wait on sockets and run a little Python between. A thread other than the main one
    that holds the GIL at a tick is asked to let it go; a thread waiting for the GIL then takes
    it, and the loop waits for its turn: at 1 kHz that adds 2-3 points to the work that no tick
    sees (the next tick is a whole interval later). The main thread samples itself and is never
    held up."""
    truth, sampled = compare("socket", rate=1000, seconds=2, in_thread=in_thread, others=2)
    assert_close(truth, sampled, points)


def test_cpu_time_adds_up_to_the_threads_cpu_clock():
    """CPU mode weighs each sample by the thread's CPU time since its previous sample: the loop's
    samples add up to the CPU time its own clock measured, and the work, whose phases last several
    intervals, holds nearly all of it. (Within an interval the CPU time goes to the stack seen at
    its end, so CPU shares of parts shorter than an interval follow their wall shares.)"""
    truth, sampled = compare("sleep", rate=100, seconds=3, burst_ms=60, block_ms=60, mode="cpu")
    assert truth["burst"] > 0.9
    assert sampled["burst"] > 0.8, sampled


def _fifo_tasks() -> list[int]:
    import os

    tasks = []
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            if os.sched_getscheduler(tid) == os.SCHED_FIFO:
                tasks.append(tid)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return tasks


def _may_run_real_time() -> bool:
    import resource

    with open("/proc/self/status") as fh:
        caps = next(int(line.split()[1], 16) for line in fh if line.startswith("CapEff:"))
    return bool(caps & (1 << 23)) or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0  # CAP_SYS_NICE


def test_only_the_clock_thread_runs_real_time_and_only_while_sampling():
    """Where the process may (CAP_SYS_NICE, as root has, or an RLIMIT_RTPRIO), the clock thread runs
    SCHED_FIFO; no other thread does, and none once the profiler stops."""
    import os
    import threading

    from flameprof.profiler import Profiler

    may = _may_run_real_time()
    profiler = Profiler(rate=200).start()
    try:
        compare("sleep", rate=200, seconds=0.3)  # a nested profiler: the same clock
        during = _fifo_tasks()
    finally:
        profiler.stop()
    assert len(during) == (1 if may else 0)
    assert os.getpid() not in during and threading.get_native_id() not in during
    assert _fifo_tasks() == []


def test_a_closed_scope_leaves_the_interpreter_to_be_frozen_again():
    """While a user scope is open, the clock samples with the GIL (the sample asks Python about the
    scope); once every scope is closed, it samples the frozen interpreter again."""
    import flameprof
    from flameprof import _native
    from flameprof.profiler import Profiler

    def clock_samples(seconds: float, in_scope: bool) -> tuple[int, int]:
        before = _native.clock_stats()
        if in_scope:
            with flameprof.scope("setup"):
                compare("sleep", rate=1000, seconds=seconds, in_thread=True)
        else:
            compare("sleep", rate=1000, seconds=seconds, in_thread=True)
        after = _native.clock_stats()
        return after["by_clock_thread"] - before["by_clock_thread"], after["frozen"] - before["frozen"]

    profiler = Profiler(rate=1000).start()
    try:
        by_clock, frozen = clock_samples(0.3, in_scope=True)
        assert by_clock > 100 and frozen == 0
        by_clock, frozen = clock_samples(0.3, in_scope=False)
        assert frozen > 0.9 * by_clock > 90
    finally:
        profiler.stop()
